"""Hugging Face config.json -> ModelShape for the Llama, Mistral, Qwen2/Qwen3 (dense and MoE), Mixtral, OPT and
DeepSeek-V2/V3 families. A registry maps model_type to a builder; unknown types are refused with the list.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from hwmodels.units import InputError
from sim.model.formats import SMALL_PARAM_BYTES, WeightFormat, parse_format
from sim.model.quant import KEEP_16BIT, format_from_quant
from sim.model.shapes import LAUNCHES, QK_NORM_LAUNCHES, ModelShape, UnitShape, make_unit
from sim.model.from_hf import check_known, shape_from_transformers

KV_BYTES = 2  # 16-bit KV cache
BUILDERS: dict[str, Callable[[dict, WeightFormat, str], ModelShape]] = {}


def register(*model_types: str):
    def deco(fn):
        for t in model_types:
            BUILDERS[t] = fn
        return fn
    return deco


# Largest value each size field may take: well above every published model, far below what would hang the builder.
MAX_FIELD = {"num_hidden_layers": 1024, "hidden_size": 131_072, "intermediate_size": 1_048_576,
             "moe_intermediate_size": 1_048_576, "ffn_dim": 1_048_576, "vocab_size": 4_194_304,
             "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 4096,
             "num_local_experts": 1024, "num_experts": 1024, "n_routed_experts": 1024, "num_experts_per_tok": 64,
             "n_shared_experts": 64, "max_position_embeddings": 16_777_216}
MAX_FIELD_DEFAULT = 1_048_576
# Fields that divide or count something and so must be at least 1.
POSITIVE = {"num_hidden_layers", "hidden_size", "intermediate_size", "moe_intermediate_size", "ffn_dim", "vocab_size",
            "num_attention_heads", "num_key_value_heads", "num_local_experts", "num_experts", "n_routed_experts",
            "num_experts_per_tok", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", "moe_layer_freq", "head_dim"}
MAX_UNITS = 50_000  # units of one model (DeepSeek-V3 has 15k)


class _Cfg:
    """Typed access to config.json fields with one-sentence errors (type, range, required)."""

    def __init__(self, cfg: dict, source: str):
        self.cfg, self.source = cfg, source

    def int(self, key: str, default: Any = ...) -> int:
        value = self.cfg.get(key, default)
        if value is ... or value is None:
            if default is ...:
                raise InputError(f"{self.source}: field {key!r} is missing for model_type "
                                 f"{self.cfg.get('model_type')!r}; add it as in the model's original config.json.")
            return default
        low, high = (1 if key in POSITIVE else 0), MAX_FIELD.get(key, MAX_FIELD_DEFAULT)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            raise InputError(f"{self.source}: field {key!r} is {shown}; it must be a whole number from {low} to {high}.")
        return value

    def get(self, key: str, default: Any = None) -> Any:
        return self.cfg.get(key, default)


def _head(fmt: WeightFormat, h: int, vocab: int, n_blocks: int, tied: bool, norm_params: int,
          embed_modules=("model.embed_tokens",), head_modules=("model.norm", "lm_head"), extra_embed: int = 0):
    emb = make_unit(fmt, name=embed_modules[0], kind="embedding", block=-1, modules=embed_modules,
                    matrix_params=vocab * h + extra_embed, max_tensor_params=vocab * h, flop_params=0, hidden=h)
    head = make_unit(fmt, name="lm_head", kind="lm_head", block=n_blocks, modules=head_modules,
                     matrix_params=vocab * h, max_tensor_params=vocab * h, small_params=norm_params, hidden=h)
    if tied:  # the head reuses the embedding matrix: its bytes must still reach the GPU, its params count once
        head = head.model_copy(update={"matrix_params": 0, "tied_nbytes": fmt.matrix_nbytes(vocab * h)})
    return emb, head


def _gqa_attention(c: _Cfg, h: int, qkv_bias: bool, qk_norm: bool) -> tuple[int, int, int, int]:
    """(matrix params, small params, attn FLOPs per context token, KV bytes per token); its largest matrix, the
    query's or the output's, is h * (the attention FLOPs per context token / 4)."""
    n_h = c.int("num_attention_heads")
    n_kv = c.int("num_key_value_heads", n_h)
    if n_kv > n_h or n_h % n_kv:
        raise InputError(f"{c.source}: field 'num_key_value_heads' is {n_kv}; it must divide num_attention_heads ({n_h}).")
    if c.get("head_dim") is None and h % n_h:  # transformers' own rule: hidden_size splits into the heads
        raise InputError(f"{c.source}: field 'num_attention_heads' is {n_h}, which does not divide hidden_size ({h}); "
                         "give heads that divide it, or head_dim.")
    d = c.int("head_dim") if c.get("head_dim") is not None else h // n_h
    if d < 1:
        raise InputError(f"{c.source}: field 'num_attention_heads' is {n_h}, more than hidden_size ({h}); give "
                         "head_dim or fewer heads.")
    matrix = h * (n_h + 2 * n_kv) * d + n_h * d * h
    small = 2 * h + ((n_h + 2 * n_kv) * d if qkv_bias else 0) + (2 * d if qk_norm else 0)
    return matrix, small, 4 * n_h * d, 2 * n_kv * d * KV_BYTES


# fields that change a dense model's weights which its table does not model: refused when set, never dropped
DENSE_UNREAD = ("mlp_bias", "num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")


@register("llama", "mistral", "qwen2", "qwen3")
def _dense(cfg: dict, fmt: WeightFormat, source: str) -> ModelShape:
    c = _Cfg(cfg, source)
    t = cfg["model_type"]
    for key in DENSE_UNREAD:
        if cfg.get(key):
            raise InputError(f"{source}: field {key!r} = {str(cfg[key])[:40]!r} changes the weights of a {t} model, "
                             f"which offloadsim's {t} table does not model; remove it, or give the model_type it "
                             "belongs to (an MoE family such as qwen3_moe or mixtral).")
    h, n_layers, inter, vocab = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("intermediate_size"), c.int("vocab_size")
    a_mat, a_small, a_flops, kv = _gqa_attention(c, h, qkv_bias=(t == "qwen2") or bool(cfg.get("attention_bias")),
                                                 qk_norm=(t == "qwen3"))
    emb, head = _head(fmt, h, vocab, n_layers, bool(cfg.get("tie_word_embeddings", False)), h)
    units = [emb]
    for i in range(n_layers):
        units.append(make_unit(fmt, name=f"model.layers.{i}", kind="decoder", block=i, modules=(f"model.layers.{i}",),
                               matrix_params=a_mat + 3 * h * inter, small_params=a_small, attn_flops_per_ctx_token=a_flops,
                               max_tensor_params=max(h * inter, h * a_flops // 4),
                               kv_bytes_per_token=kv, hidden=h,
                               launches=LAUNCHES["decoder"] + (QK_NORM_LAUNCHES if t == "qwen3" else 0)))
    return ModelShape(name=cfg.get("_name_or_path") or t, family=t, weight_format=fmt, n_blocks=n_layers, hidden=h,
                      vocab=vocab, units=tuple(units + [head]))


@dataclass(frozen=True)
class _BlockDims:
    """The dimensions every MoE block of a model shares. `attention`: _gqa_attention's (matrix params, small params,
    attention FLOPs per context token, KV bytes per token); `prefix`: the experts' module path, {i} for the block;
    `a_largest`: the attention's largest matrix (params), by default the query's of a grouped-query attention."""
    hidden: int
    prefix: str
    n_experts: int
    expert_inter: int
    attention: tuple[int, int, int, int]
    router_small: int = 0
    n_shared: int = 0
    shared_inter: int = 0
    a_largest: int = 0


def _moe_block(fmt: WeightFormat, i: int, d: _BlockDims, dense_inter: int = 0) -> list[UnitShape]:
    """Block `i` of a MoE model: attention (+norms, router) as one unit, each routed expert, the shared experts; a
    dense block (`dense_inter`: its MLP's width) as one decoder unit."""
    h, prefix, n_experts, expert_inter, router_small = d.hidden, d.prefix, d.n_experts, d.expert_inter, d.router_small
    n_shared, shared_inter = d.n_shared, d.shared_inter
    a_mat, a_small, a_flops, kv = d.attention
    a_largest = d.a_largest or h * a_flops // 4
    gate = n_experts * h
    if dense_inter:
        return [make_unit(fmt, name=f"model.layers.{i}", kind="decoder", block=i, modules=(f"model.layers.{i}",),
                          matrix_params=a_mat + 3 * h * dense_inter, small_params=a_small,
                          max_tensor_params=max(h * dense_inter, a_largest),
                          attn_flops_per_ctx_token=a_flops, kv_bytes_per_token=kv, hidden=h)]
    out = [make_unit(fmt, name=f"model.layers.{i}", kind="attention", block=i, modules=(f"model.layers.{i}",),
                     matrix_params=a_mat, small_params=a_small + gate + router_small, attn_flops_per_ctx_token=a_flops,
                     max_tensor_params=a_largest,
                     kv_bytes_per_token=kv, hidden=h, flop_params=a_mat + gate)]
    for e in range(n_experts):
        name = f"{prefix.format(i=i)}.experts.{e}"
        out.append(make_unit(fmt, name=name, kind="expert", block=i, expert=e, modules=(name,),
                             matrix_params=3 * h * expert_inter, max_tensor_params=h * expert_inter, hidden=h))
    if n_shared:
        name = f"{prefix.format(i=i)}.shared_experts"
        out.append(make_unit(fmt, name=name, kind="shared-expert", block=i, modules=(name,),
                             matrix_params=3 * h * shared_inter * n_shared,
                             max_tensor_params=h * shared_inter * n_shared, hidden=h))
    return out


@register("mixtral", "qwen3_moe", "qwen2_moe")
def _moe_gqa(cfg: dict, fmt: WeightFormat, source: str) -> ModelShape:
    c = _Cfg(cfg, source)
    t = cfg["model_type"]
    h, n_layers, vocab = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("vocab_size")
    if t == "mixtral":
        n_exp, topk, e_inter, prefix = c.int("num_local_experts"), c.int("num_experts_per_tok"), c.int("intermediate_size"), "model.layers.{i}.block_sparse_moe"
    else:
        n_key = "num_experts" if cfg.get("num_experts") is not None else "num_local_experts"  # transformers 5 name
        n_exp, topk, e_inter, prefix = c.int(n_key), c.int("num_experts_per_tok"), c.int("moe_intermediate_size"), "model.layers.{i}.mlp"
    dims = _BlockDims(h, prefix, n_exp, e_inter, _gqa_attention(c, h, qkv_bias=(t == "qwen2_moe"),
                                                                qk_norm=(t == "qwen3_moe")))
    emb, head = _head(fmt, h, vocab, n_layers, bool(cfg.get("tie_word_embeddings", False)), h)
    units = [emb]
    for i in range(n_layers):
        units += _moe_block(fmt, i, dims)
    if t == "qwen3_moe":  # q/k norms
        units = [u.model_copy(update={"launches": u.launches + QK_NORM_LAUNCHES}) if u.kind == "attention" else u
                 for u in units]
    return ModelShape(name=cfg.get("_name_or_path") or t, family=t, weight_format=fmt, n_blocks=n_layers, hidden=h,
                      vocab=vocab, n_routed_experts=n_exp, experts_per_token=topk, units=tuple(units + [head]))


@register("deepseek_v3", "deepseek_v2")
def _deepseek(cfg: dict, fmt: WeightFormat, source: str) -> ModelShape:
    c = _Cfg(cfg, source)
    h, n_layers, vocab = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("vocab_size")
    n_h, q_lora, kv_lora = c.int("num_attention_heads"), c.int("q_lora_rank", 0), c.int("kv_lora_rank")
    nope, rope, v_dim = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim"), c.int("v_head_dim")
    qk = nope + rope
    q_mat = (h * q_lora + q_lora * n_h * qk) if q_lora else h * n_h * qk
    a_mat = q_mat + h * (kv_lora + rope) + kv_lora * n_h * (nope + v_dim) + n_h * v_dim * h
    a_small = (q_lora if q_lora else 0) + kv_lora + 2 * h
    a_flops = 2 * n_h * (qk + v_dim)
    a_largest = max(*((h * q_lora, q_lora * n_h * qk) if q_lora else (h * n_h * qk,)), h * (kv_lora + rope),
                    kv_lora * n_h * (nope + v_dim), n_h * v_dim * h)
    kv = (kv_lora + rope) * KV_BYTES  # compressed latent cache (MLA)
    n_exp, topk = c.int("n_routed_experts"), c.int("num_experts_per_tok")
    dense_layers, freq = c.int("first_k_dense_replace", 0), c.int("moe_layer_freq", 1)
    router_bias = n_exp if cfg.get("model_type") == "deepseek_v3" else 0
    emb, head = _head(fmt, h, vocab, n_layers, bool(cfg.get("tie_word_embeddings", False)), h)
    units = [emb]
    dims = _BlockDims(h, "model.layers.{i}.mlp", n_exp, c.int("moe_intermediate_size"), (a_mat, a_small, a_flops, kv),
                      router_bias, n_shared=c.int("n_shared_experts", 0), shared_inter=c.int("moe_intermediate_size"),
                      a_largest=a_largest)
    for i in range(n_layers):
        dense = i < dense_layers or (i % max(freq, 1) != 0)
        units += _moe_block(fmt, i, dims, dense_inter=c.int("intermediate_size") if dense else 0)
    return ModelShape(name=cfg.get("_name_or_path") or cfg["model_type"], family=cfg["model_type"], weight_format=fmt,
                      n_blocks=n_layers, hidden=h, vocab=vocab, n_routed_experts=n_exp, experts_per_token=topk,
                      units=tuple(units + [head]))


@register("opt")
def _opt(cfg: dict, fmt: WeightFormat, source: str) -> ModelShape:
    c = _Cfg(cfg, source)
    h, n_layers, ffn, vocab = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("ffn_dim"), c.int("vocab_size")
    c.int("num_attention_heads")  # required; MHA, so KV bytes follow from the hidden size
    if c.int("word_embed_proj_dim", h) != h:
        raise InputError(f"{source}: word_embed_proj_dim {cfg['word_embed_proj_dim']} differs from hidden_size {h}; "
                         "OPT-350m's projections are not supported, use another OPT size.")
    positions = c.int("max_position_embeddings") + 2  # OPT's learned positions carry an offset of 2
    emb, head = _head(fmt, h, vocab, n_layers, bool(cfg.get("tie_word_embeddings", True)), 2 * h,
                      embed_modules=("model.decoder.embed_tokens", "model.decoder.embed_positions"),
                      head_modules=("model.decoder.final_layer_norm", "lm_head"), extra_embed=positions * h)
    units = [emb]
    for i in range(n_layers):
        name = f"model.decoder.layers.{i}"
        units.append(make_unit(fmt, name=name, kind="decoder", block=i, modules=(name,),
                               matrix_params=4 * h * h + 2 * h * ffn, small_params=4 * h + ffn + h + 4 * h,
                               max_tensor_params=max(h * ffn, h * h),
                               attn_flops_per_ctx_token=4 * h, kv_bytes_per_token=2 * h * KV_BYTES, hidden=h))
    return ModelShape(name=cfg.get("_name_or_path") or "opt", family="opt", weight_format=fmt, n_blocks=n_layers,
                      hidden=h, vocab=vocab, units=tuple(units + [head]))


def default_format(cfg: dict, source: str = "config.json") -> WeightFormat:
    """The checkpoint's native format: from quantization_config when present (sim/model/quant.py), else torch_dtype."""
    q = cfg.get("quantization_config") or {}
    if not isinstance(q, dict):
        raise InputError(f"{source}: field 'quantization_config' is {str(q)[:40]!r}; it must be an object such as "
                         "{\"quant_method\": \"fp8\"}, or leave it out.")
    if q:
        return format_from_quant(q, source)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return parse_format({"float16": "fp16", "half": "fp16"}.get(dtype, "bf16"))


def _keep_16bit(shape: ModelShape) -> ModelShape:
    """Embedding and head units at 16 bits per weight, as quantized checkpoints store them."""
    bf16 = parse_format("bf16")
    units = []
    for u in shape.units:
        if u.kind in KEEP_16BIT:
            tied = bf16.matrix_nbytes(shape.vocab * shape.hidden) if u.tied_nbytes else 0
            u = u.model_copy(update={"nbytes": bf16.matrix_nbytes(u.matrix_params) + SMALL_PARAM_BYTES * u.small_params
                                     + tied, "tied_nbytes": tied})
        units.append(u)
    return shape.model_copy(update={"units": tuple(units)})


def shape_from_config(cfg: dict, fmt: WeightFormat | None = None, source: str = "config.json") -> ModelShape:
    """Build a ModelShape from a parsed config.json; raises InputError naming the field and the fix."""
    if not isinstance(cfg, dict):
        raise InputError(f"{source}: expected a JSON object with model_type and sizes; got {type(cfg).__name__}.")
    t = cfg.get("model_type")
    if not isinstance(t, str) or not t:
        raise InputError(f"{source}: model_type {str(t)[:40]!r} is not supported; supported: {', '.join(sorted(BUILDERS))}.")
    if t not in BUILDERS:  # no table: transformers' own layout of this config (sim/model/from_hf.py)
        check_known(t, source, sorted(BUILDERS))
        return _checked(shape_from_transformers(cfg, fmt or default_format(cfg, source), source), cfg, fmt, source)
    c = _Cfg(cfg, source)
    n_layers = c.int("num_hidden_layers")
    experts = max((c.int(k) for k in ("num_local_experts", "num_experts", "n_routed_experts") if cfg.get(k) is not None),
                  default=0)
    if experts:
        k = c.int("num_experts_per_tok")
        if k > experts:
            raise InputError(f"{source}: field 'num_experts_per_tok' is {k}; it must be at most the {experts} experts.")
    if n_layers * (experts + 2) > MAX_UNITS:
        raise InputError(f"{source}: field 'num_hidden_layers' is {n_layers} with {experts} experts each, more than "
                         f"{MAX_UNITS:,} units; check the config.")
    return _checked(BUILDERS[t](cfg, fmt or default_format(cfg, source), source), cfg, fmt, source)


def _checked(shape: ModelShape, cfg: dict, fmt: WeightFormat | None, source: str) -> ModelShape:
    if fmt is None and cfg.get("quantization_config"):
        shape = _keep_16bit(shape)
    if shape.total_bytes <= 0 or shape.total_bytes > 2**50:
        raise InputError(f"{source}: the sizes give {shape.total_bytes:,} bytes of weights; check hidden_size, "
                         "intermediate_size and vocab_size.")
    return shape
