"""Frozen model shapes: the units that are stored, streamed and computed (a decoder layer, an expert, ...).

FLOPs and bytes touched are pure functions of a unit and a workload step (batch B, new tokens S, context K).
"""
from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from hwmodels.names import Name
from sim.model.formats import SMALL_PARAM_BYTES, WeightFormat

UnitKind = Literal["embedding", "decoder", "attention", "mlp", "expert", "shared-expert", "norm", "lm_head"]

# Kernel launches per unit in an eager PyTorch forward at decode (HF modeling code); decides decode overhead on the
# roofline. Counted by tests/test_launches.py (aten ops that launch a kernel, per module, transformers' Llama and
# Qwen3): a Llama decoder 40, a final norm 8 (the head unit: norm + lm_head = 9), the embedding 1; Qwen3's q/k norms
# add 16. The MoE kinds (attention 26, mlp 8, expert 5) are estimates, not counted.
LAUNCHES = {"embedding": 1, "decoder": 40, "attention": 26, "mlp": 8, "expert": 5, "shared-expert": 5,
            "norm": 8, "lm_head": 9}
QK_NORM_LAUNCHES = 16

# Parameter-holding modules per unit in Hugging Face's eager layout (modeling_llama.py / modeling_qwen3.py): a
# decoder is q/k/v/o, gate/up/down and two norms; Qwen3 adds q_norm and k_norm. Peer engines hook each of them.
PARAM_MODULES = {"embedding": 1, "decoder": 9, "attention": 6, "mlp": 3, "expert": 3, "shared-expert": 3,
                 "norm": 1, "lm_head": 1}
QK_NORM_FAMILIES = ("qwen3", "qwen3_moe")
ATTENTION_KINDS = ("decoder", "attention")  # the unit kinds that hold an attention (and its KV cache)

# Operators that compute (not views) per unit in llama.cpp's graph at decode: ggml's CPU backend joins its threads
# at a barrier after each (ggml-cpu.c, ggml_graph_compute_thread), its CUDA backend launches one or two kernels.
# Counted from llama.cpp's graph code (llama-cpp-python 0.3.36's tree: src/models/llama.cpp, qwen3.cpp and
# llama-graph.cpp's build_norm/build_qkv/build_attn/build_ffn): a decoder is rms_norm+mul, q/k/v mul_mat, two ropes,
# two KV-cache set_rows, kq mul_mat, soft_max, kqv mul_mat, cont, wo mul_mat, add, rms_norm+mul, up and gate
# mul_mat, swiglu, down mul_mat, add (22); Qwen3's q/k norms add rms_norm+mul each (4); the embedding is a get_rows,
# the head the final rms_norm+mul and its mul_mat. A shared expert's count is an estimate (a dense FFN's).
GGML_OPS = {"embedding": 1, "decoder": 22, "attention": 15, "mlp": 7, "expert": 0, "shared-expert": 4, "norm": 2,
            "lm_head": 3}
# A block's routed experts are operators of the block, not of each expert (llama-graph.cpp, build_moe_ffn): one
# MUL_MAT_ID per fused weight (up, gate, down: every expert of the block in one operator and one GGUF tensor,
# ffn_*_exps), the GLU, the routing weights' MUL, and k - 1 ADDs summing each token's k experts; paid once per block
# and step whatever experts run (ggml_moe_ops), so an expert unit has none of its own
GGML_MOE_OPS = 5
GGML_MOE_WEIGHTS = 3
QK_NORM_GGML_OPS = 4
# With flash attention on (llama-graph.cpp, build_attn_mha), the scores' mul_mat, the soft_max, the product with V and
# the cont that recombines the heads are one flash_attn_ext (its reshape a view): three operators fewer an attention
FLASH_ATTN_SAVED_OPS = 3
# Weight tensors per unit in a GGUF (llama.cpp's names): a decoder's attn_norm, q, k, v, output, ffn_norm, gate, up,
# down (9), Qwen3's attn_q_norm and attn_k_norm (2 more); the head output_norm and output. On a step of >= 32 tokens
# ggml's scheduler runs every operator with a CPU-held weight on the GPU, each in a split of its own (a new split
# per weight, so that their VRAM is reused: ggml-backend.cpp, ggml_backend_sched_split_graph), measured with
# GGML_SCHED_DEBUG (84 splits per graph for 8 Llama layers, 340 for 28 Qwen3 layers; lab/data/peers/llamacpp-s.json).
GGML_WEIGHTS = {"embedding": 1, "decoder": 9, "attention": 5, "mlp": 4, "expert": 0, "shared-expert": 3, "norm": 1,
                "lm_head": 2}  # routed experts: GGML_MOE_WEIGHTS per block
QK_NORM_GGML_WEIGHTS = 2
# ggml's KV cache grows in whole chunks of cells: attention runs over the used cells rounded up to this many
# (llama-kv-cache.cpp, get_n_kv: max(n_pad, 256)), masked, for every sequence sharing the cache
GGML_KV_PAD = 256


# A safetensors checkpoint's shard size by convention (the hub's and transformers 4's 5 GB): how many tensors share
# a file's header, which Accelerate's disk offload parses at every open
SHARD_BYTES = 5 * 10**9


def param_modules(kind: str, family: str) -> int:
    """Parameter-holding modules of a unit of this kind (peer engines' hooks and per-tensor copies scale with it)."""
    extra = 2 if family in QK_NORM_FAMILIES and kind in ATTENTION_KINDS else 0
    return PARAM_MODULES[kind] + extra


def ggml_ops(kind: str, family: str, flash_attention: bool = False) -> int:
    """Computing operators of a unit of this kind in llama.cpp's graph (GGML_OPS), its attention as separate
    operators or, with `flash_attention`, fused (FLASH_ATTN_SAVED_OPS fewer)."""
    attention = kind in ATTENTION_KINDS
    extra = QK_NORM_GGML_OPS if family in QK_NORM_FAMILIES and attention else 0
    return GGML_OPS[kind] + extra - (FLASH_ATTN_SAVED_OPS if flash_attention and attention else 0)


def ggml_moe_ops(experts_per_token: int) -> int:
    """Operators of one block's routed experts in llama.cpp's graph, whatever experts run (GGML_MOE_OPS; one
    token's single expert is made contiguous instead of summed)."""
    return GGML_MOE_OPS + max(experts_per_token - 1, 1)


def ggml_weights(kind: str, family: str) -> int:
    """Weight tensors of a unit of this kind in a GGUF (GGML_WEIGHTS)."""
    extra = QK_NORM_GGML_WEIGHTS if family in QK_NORM_FAMILIES and kind in ATTENTION_KINDS else 0
    return GGML_WEIGHTS[kind] + extra


class UnitShape(BaseModel):
    """One unit of placement: stored, moved and computed as a whole."""
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(description="Unit name; also the module prefix of its tensors.")
    kind: UnitKind
    block: int = Field(description="Decoder block index; -1 for the embedding, n_blocks for the head.")
    expert: int | None = Field(default=None, description="Routed expert index inside its block, if any.")
    modules: tuple[str, ...] = Field(description="Module name prefixes whose tensors belong to this unit.")
    matrix_params: NonNegativeInt = Field(description="Parameters in weight matrices (quantizable).")
    small_params: NonNegativeInt = Field(default=0, description="Norm, bias and router-bias parameters (16-bit).")
    nbytes: NonNegativeInt = Field(description="Stored bytes in the model's weight format.")
    flop_params: NonNegativeInt = Field(description="Parameters multiplied per token (2 FLOPs each).")
    attn_flops_per_ctx_token: NonNegativeInt = Field(default=0, description="Score+value FLOPs per query per context token.")
    kv_bytes_per_token: NonNegativeInt = Field(default=0, description="KV-cache bytes added per token (16-bit cache).")
    hidden: int = Field(description="Hidden size (activation bytes per token = 2*hidden).")
    tied_nbytes: NonNegativeInt = Field(default=0, description="Bytes shared with another unit (tied embeddings), counted once in totals.")
    launches: int = Field(description="Kernel launches per forward.")
    max_tensor_nbytes: NonNegativeInt = Field(default=0, description="Stored bytes of the unit's largest weight "
                                              "tensor (a routed expert's: its slice of the block's fused tensor); "
                                              "0: not known, the whole unit.")

    @property
    def params(self) -> int:
        return self.matrix_params + self.small_params

    @property
    def largest_tensor_bytes(self) -> int:
        """The bytes of its largest weight tensor, or of the whole unit where that is not known."""
        return self.max_tensor_nbytes or self.nbytes

    def flops(self, batch: int, new_tokens: int, context: int) -> float:
        """FLOPs for B sequences each adding S tokens to a cache holding K tokens (K = 0 for a fresh prompt)."""
        tokens = batch * new_tokens
        attn = self.attn_flops_per_ctx_token * batch * (new_tokens * context + new_tokens * (new_tokens + 1) / 2)
        return 2.0 * self.flop_params * tokens + attn

    def ggml_attention_flops(self, batch: int, new_tokens: int, context: int) -> float:
        """The attention FLOPs of llama.cpp's graph: every new token of the B sequences against every used cell of
        the one KV cache they share (B x (K + S) cells, rounded up to GGML_KV_PAD), masked rather than skipped."""
        cells = -(-batch * (context + new_tokens) // GGML_KV_PAD) * GGML_KV_PAD
        return self.attn_flops_per_ctx_token * batch * new_tokens * cells

    def bytes_touched(self, batch: int, new_tokens: int, context: int) -> float:
        """Bytes read or written: weights (lookup rows for an embedding), KV cache, activations."""
        tokens = batch * new_tokens
        weights = tokens * self.hidden * SMALL_PARAM_BYTES if self.kind == "embedding" else self.nbytes
        kv = self.kv_bytes_per_token * batch * (context + new_tokens)
        return weights + kv + 4.0 * tokens * self.hidden


class ModelShape(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: Name = Field(description="The model's name (config.json's _name_or_path, GGUF general.name, a preset's).")
    family: str = Field(description="config.json model_type.")
    weight_format: WeightFormat
    n_blocks: int
    hidden: int
    vocab: int
    n_routed_experts: int = 0
    experts_per_token: int = 0
    units: tuple[UnitShape, ...]

    @property
    def total_params(self) -> int:
        return sum(u.params for u in self.units)

    @property
    def total_bytes(self) -> int:
        """Bytes stored once (tied matrices counted once)."""
        return sum(u.nbytes - u.tied_nbytes for u in self.units)

    @cached_property
    def tensors_per_shard(self) -> float:
        """The mean header entries of the model's checkpoint files: its tensors over ceil(bytes / SHARD_BYTES)."""
        tensors = sum(param_modules(u.kind, self.family) for u in self.units)
        return tensors / max(1, -(-self.total_bytes // SHARD_BYTES))

    @property
    def kv_bytes_per_token(self) -> int:
        return sum(u.kv_bytes_per_token for u in self.units)

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    def active_params(self) -> int:
        """Parameters used per token (routed experts counted top-k of n)."""
        routed = sum(u.params for u in self.units if u.expert is not None)
        rest = sum(u.params for u in self.units if u.expert is None)
        share = self.experts_per_token / self.n_routed_experts if self.n_routed_experts else 0
        return int(rest + routed * share)

    @property
    def tied_head(self) -> bool:
        """The output head reuses the embedding's matrix (tie_word_embeddings)."""
        return any(u.kind == "lm_head" and u.tied_nbytes for u in self.units)

    @cached_property
    def by_name(self) -> dict[str, UnitShape]:
        return {u.name: u for u in self.units}

    def model_copy(self, *, update=None, deep: bool = False) -> "ModelShape":
        """pydantic's copy, without the cached properties read from the original (it copies them as they were, so a
        copy with other units would look its units up in the old ones)."""
        out = super().model_copy(update=update, deep=deep)
        if update:
            for name in CACHED:
                out.__dict__.pop(name, None)
        return out

    def unit(self, name: str) -> UnitShape:
        return self.by_name[name]


CACHED = tuple(n for n, v in vars(ModelShape).items() if isinstance(v, cached_property))


def make_unit(fmt: WeightFormat, *, matrix_params: int, small_params: int = 0, max_tensor_params: int = 0,
              **kw) -> UnitShape:
    """Build a unit, computing its stored bytes (and its largest tensor's, where given) from the weight format."""
    kw.setdefault("launches", LAUNCHES[kw["kind"]])
    kw.setdefault("flop_params", matrix_params)
    nbytes = fmt.matrix_nbytes(matrix_params) + SMALL_PARAM_BYTES * small_params
    largest = min(fmt.matrix_nbytes(max_tensor_params), nbytes) if max_tensor_params else 0
    return UnitShape(matrix_params=matrix_params, small_params=small_params, nbytes=nbytes, max_tensor_nbytes=largest,
                     **kw)
