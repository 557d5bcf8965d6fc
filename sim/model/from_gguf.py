"""A GGUF file (llama.cpp's format) -> ModelShape with the exact stored bytes of every unit.

The header is read by a bounded pass (sim/model/gguf_header.py: metadata and each tensor's name, type and bytes; no
weights, no tokenizer). The metadata is mapped, type-checked, to the config.json fields the family builders take
(sim/model/families.py), which give the units, parameters, FLOPs and KV bytes; then each unit's nbytes is replaced
by the bytes of its tensors: `blk.{i}.*` -> block i (its attention unit for MoE), the fused `*_exps` tensors split
evenly over the experts (the expert is the outermost axis, so each slice is whole quant blocks), per-expert
`ffn_*.{e}` tensors (older Mixtral files) -> expert e, `*_shexp` -> the shared experts (a shared-expert unit is added
where the family's builder has none), `token_embd.*` and tensors of no block -> the embedding, `output*` -> the head
(the embedding's bytes when tied). Every tensor's bytes land in exactly one unit.

Architectures are mapped to the builder whose units and matrices they share; the shape's family is that builder's
(so every engine prices it as that family): gemma2 and phi3 (fused q/k/v and gate/up tensors) as llama, gemma3 as
qwen3 (q/k norms), olmoe as qwen3_moe, gpt-oss as qwen2_moe (q/k/v biases), llama with experts as mixtral, deepseek2
as deepseek_v3 (with its router bias, exp_probs_b) or deepseek_v2. Sliding-window layers (gemma2, gemma3, gpt-oss)
are priced with a full-context KV cache.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from hwmodels.units import InputError
from sim.model.families import MAX_FIELD, MAX_FIELD_DEFAULT, shape_from_config
from sim.model.formats import WeightFormat
from sim.model.gguf_header import Skipped, read_header
from sim.model.shapes import ModelShape, make_unit

# GGUF general.architecture -> config.json model_type of the builder (llama with experts is Mixtral's layout)
ARCH = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3", "qwen2moe": "qwen2_moe",
        "qwen3moe": "qwen3_moe", "gemma2": "llama", "gemma3": "qwen3", "phi3": "llama", "olmoe": "qwen3_moe",
        "gpt-oss": "qwen2_moe", "deepseek2": "deepseek_v2"}
PER_EXPERT = re.compile(r"^ffn_(?:gate|up|down)\.(\d+)\.")  # blk.N.ffn_gate.E.weight (Mixtral before fused experts)


def _describe(value) -> str:
    if isinstance(value, Skipped):
        return value.what
    if isinstance(value, tuple):
        return f"an array of {len(value):,} values"
    shown = repr(value)
    return f"the {type(value).__name__} {shown if len(shown) <= 40 else shown[:37] + '...'}"


class _Meta:
    """Typed access to `{arch}.*` metadata: each value's type and range checked, one sentence naming the key."""

    def __init__(self, meta: dict, arch: str, source: str):
        self.meta, self.arch, self.source = meta, arch, source

    def int(self, key: str, field: str, default=...) -> int:
        full = f"{self.arch}.{key}"
        value = self.meta.get(full)
        if value is None:
            if default is ...:
                raise InputError(f"{self.source}: GGUF metadata {full!r} is missing; the file was not written by a "
                                 "complete converter, re-convert it with llama.cpp's convert_hf_to_gguf.py.")
            return default
        if isinstance(value, tuple) and value and len(set(value)) == 1:  # a per-layer array of one value
            value = value[0]
        high = MAX_FIELD.get(field, MAX_FIELD_DEFAULT)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
            raise InputError(f"{self.source}: GGUF metadata {full!r} is {_describe(value)}; it must be a whole number "
                             f"from 0 to {high:,} (as written by llama.cpp's convert_hf_to_gguf.py), re-convert the "
                             "file.")
        return value


def _architecture(meta: dict, tensors: dict, source: str) -> tuple[str, str]:
    """(the GGUF architecture, the builder's model_type)."""
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise InputError(f"{source}: GGUF metadata 'general.architecture' is "
                         f"{'missing' if arch is None else _describe(arch)}; it must be a string such as 'llama', "
                         "re-convert the file with llama.cpp's convert_hf_to_gguf.py.")
    model_type = ARCH.get(arch)
    if model_type is None:
        raise InputError(f"{source}: GGUF architecture {arch[:40]!r} is not supported; supported: "
                         f"{', '.join(sorted(ARCH))}.")
    experts = _Meta(meta, arch, source).int("expert_count", "num_local_experts", 0)
    if arch == "llama" and experts:
        model_type = "mixtral"
    if arch == "deepseek2" and any(".exp_probs_b" in n for n in tensors):
        model_type = "deepseek_v3"  # V3's router bias (e_score_correction_bias)
    return arch, model_type


def config_from_gguf(meta: dict, tensors: dict[str, tuple[str, int, int]], source: str) -> dict:
    """The config.json fields of the family builders, from GGUF metadata (types and ranges checked)."""
    arch, model_type = _architecture(meta, tensors, source)
    m = _Meta(meta, arch, source)
    name = meta.get("general.name", Path(source).stem)
    if not isinstance(name, str):
        raise InputError(f"{source}: GGUF metadata 'general.name' is {_describe(name)}; it must be a string, "
                         "re-convert the file.")
    h = m.int("embedding_length", "hidden_size")
    n_heads = m.int("attention.head_count", "num_attention_heads")
    cfg = {"model_type": model_type, "_name_or_path": name or Path(source).stem,
           "num_hidden_layers": m.int("block_count", "num_hidden_layers"), "hidden_size": h,
           "num_attention_heads": n_heads, "vocab_size": m.int("vocab_size", "vocab_size", 0),
           "tie_word_embeddings": "output.weight" not in tensors}
    if model_type.startswith("deepseek"):
        cfg.update(_mla_fields(m))
    else:
        cfg["num_key_value_heads"] = m.int("attention.head_count_kv", "num_key_value_heads", 0) or n_heads
        head_dim = m.int("attention.key_length", "head_dim", 0)
        if head_dim:
            cfg["head_dim"] = head_dim
        cfg.update(_ffn_fields(m, model_type))
    embd = tensors.get("token_embd.weight")
    if not cfg["vocab_size"] and embd is not None:
        cfg["vocab_size"] = embd[2] // max(h, 1)
    if not cfg["vocab_size"]:
        raise InputError(f"{source}: neither '{arch}.vocab_size' nor token_embd.weight gives the vocabulary size; "
                         "re-convert the file.")
    if "blk.0.attn_q.bias" in tensors and model_type == "llama":
        cfg["attention_bias"] = True
    return cfg


def _ffn_fields(m: _Meta, model_type: str) -> dict:
    experts = m.int("expert_count", "num_local_experts", 0)
    if not experts:
        return {"intermediate_size": m.int("feed_forward_length", "intermediate_size")}
    used = m.int("expert_used_count", "num_experts_per_tok")
    if model_type == "mixtral":
        return {"num_experts_per_tok": used, "num_local_experts": experts,
                "intermediate_size": m.int("feed_forward_length", "intermediate_size")}
    return {"num_experts_per_tok": used, "num_experts": experts,
            "moe_intermediate_size": m.int("expert_feed_forward_length", "moe_intermediate_size")}


def _mla_fields(m: _Meta) -> dict:
    """DeepSeek-V2/V3's config fields from deepseek2.*: llama.cpp writes the per-head query/key and value widths as
    attention.key_length_mla/value_length_mla (current converters, key_length then being the latent's) or as
    attention.key_length/value_length (older ones)."""
    rope = m.int("rope.dimension_count", "qk_rope_head_dim")
    mla = m.meta.get(f"{m.arch}.attention.key_length_mla") is not None
    qk = m.int("attention.key_length_mla" if mla else "attention.key_length", "head_dim")
    v_dim = m.int("attention.value_length_mla" if mla else "attention.value_length", "v_head_dim")
    if qk < rope:
        raise InputError(f"{m.source}: GGUF metadata '{m.arch}.attention.key_length{'_mla' if mla else ''}' is {qk}, "
                         f"less than '{m.arch}.rope.dimension_count' ({rope}); re-convert the file.")
    return {"q_lora_rank": m.int("attention.q_lora_rank", "q_lora_rank", 0),
            "kv_lora_rank": m.int("attention.kv_lora_rank", "kv_lora_rank"),
            "qk_rope_head_dim": rope, "qk_nope_head_dim": qk - rope, "v_head_dim": v_dim,
            "n_routed_experts": m.int("expert_count", "n_routed_experts"),
            "num_experts_per_tok": m.int("expert_used_count", "num_experts_per_tok"),
            "n_shared_experts": m.int("expert_shared_count", "n_shared_experts", 0),
            "first_k_dense_replace": m.int("leading_dense_block_count", "first_k_dense_replace", 0),
            "moe_intermediate_size": m.int("expert_feed_forward_length", "moe_intermediate_size"),
            "intermediate_size": m.int("feed_forward_length", "intermediate_size")}


def _unit_of(name: str, n_blocks: int) -> tuple[int, str]:
    """(block index, -1 for the embedding or n_blocks for the head; part) of a GGUF tensor name: part is 'exps'
    (fused experts), 'exp{e}' (expert e's own tensor), 'shexp' or 'rest'."""
    if name.startswith("blk."):
        idx, _, rest = name[4:].partition(".")
        if idx.isdigit() and int(idx) < n_blocks:
            own = PER_EXPERT.match(rest)
            if "_exps" in rest:
                return int(idx), "exps"
            return int(idx), f"exp{own.group(1)}" if own else "shexp" if "_shexp" in rest else "rest"
    if name.startswith("output"):
        return n_blocks, "rest"
    return -1, "rest"


def shape_from_gguf(path: Path) -> ModelShape:
    """ModelShape of a GGUF file, every unit's nbytes the exact bytes of its tensors."""
    meta, tensors = read_header(path)
    source = str(path)
    cfg = config_from_gguf(meta, tensors, source)
    types = Counter(t[0] for name, t in tensors.items() if name.endswith(".weight") and "norm" not in name)
    shape = shape_from_config(cfg, WeightFormat(name="gguf", bits_per_weight=16.0), source=source)
    units = _with_tensor_bytes(shape, tensors, cfg["tie_word_embeddings"], source)
    matrix = sum(u.matrix_params for u in units) or 1
    stored = sum(u.nbytes - u.tied_nbytes for u in units)
    fmt_name = _file_type(meta.get("general.file_type")) or (types.most_common(1)[0][0].lower() if types else "gguf")
    fmt = WeightFormat(name=fmt_name, bits_per_weight=min(max(stored * 8 / matrix, 1.0), 32.0))
    return shape.model_copy(update={"units": tuple(units), "weight_format": fmt})


def _with_tensor_bytes(shape: ModelShape, tensors: dict, tied_head: bool, source: str) -> list:
    """The builder's units with their tensors' bytes (see the module doc); raises when a unit gets none."""
    n_blocks, n_exp = shape.n_blocks, shape.n_routed_experts
    parts: dict[tuple[int, str], int] = Counter()
    largest: dict[tuple[int, str], int] = Counter()  # each part's largest tensor (llama.cpp copies one at a time)
    elements: dict[tuple[int, str], int] = Counter()
    for name, (_, nbytes, n_el) in tensors.items():
        part = _unit_of(name, n_blocks)
        parts[part] += nbytes
        largest[part] = max(largest[part], nbytes)
        elements[part] += n_el
    embd = tensors.get("token_embd.weight")
    units = []
    for u in shape.units:
        b = u.block
        if u.kind == "embedding":
            nbytes, tied, big = parts[(-1, "rest")], 0, largest[(-1, "rest")]
        elif u.kind == "lm_head":
            tied = embd[1] if tied_head and embd is not None else 0
            nbytes, big = parts[(n_blocks, "rest")] + tied, max(largest[(n_blocks, "rest")], tied)
        elif u.kind == "expert":
            own = (b, f"exp{u.expert}")
            nbytes, tied = parts[(b, "exps")] // n_exp + parts[own], 0
            big = max(largest[(b, "exps")] // n_exp, largest[own])
        elif u.kind == "shared-expert":
            nbytes, tied, big = parts[(b, "shexp")], 0, largest[(b, "shexp")]
        elif n_exp:  # an MoE block's attention unit, or a dense block's decoder
            nbytes, tied, big = parts[(b, "rest")], 0, largest[(b, "rest")]
        else:  # a dense family's decoder: every tensor of its block
            nbytes, tied = sum(v for k, v in parts.items() if k[0] == b), 0
            big = max(v for k, v in largest.items() if k[0] == b) if nbytes else 0
        if nbytes <= 0:
            raise InputError(f"{source}: no tensor of the file belongs to unit {u.name!r} (block {u.block}); the "
                             "file's tensors do not match its metadata, re-convert it.")
        units.append(u.model_copy(update={"nbytes": nbytes, "tied_nbytes": tied, "max_tensor_nbytes": big}))
    units = _with_shared_experts(shape, units, parts, largest, elements)
    lost = sum(t[1] for t in tensors.values()) - sum(u.nbytes - u.tied_nbytes for u in units)
    if lost:
        raise InputError(f"{source}: {lost:,} bytes of the file's tensors belong to no unit of the model its "
                         "metadata describes (experts beyond its expert count, or a dense block's expert tensors); "
                         "re-convert it.")
    return units


def _with_shared_experts(shape: ModelShape, units: list, parts, largest, elements) -> list:
    """`units` with a shared-expert unit after each MoE block that has `*_shexp` tensors and none from the builder."""
    owned = {u.block for u in shape.units if u.kind == "shared-expert"}
    need = {u.block for u in shape.units
            if u.kind == "attention" and parts[(u.block, "shexp")] and u.block not in owned}
    if not need:
        return units
    out = []
    for i, u in enumerate(units):
        out.append(u)
        if u.block in need and (i + 1 == len(units) or units[i + 1].block != u.block):
            key = (u.block, "shexp")
            out.append(_shared_expert(shape, u.block, parts[key], largest[key], elements[key]))
    return out


def _shared_expert(shape: ModelShape, block: int, nbytes: int, big: int, params: int):
    """A shared-expert unit for `*_shexp` tensors of a family whose builder has none (Qwen2-MoE's shared_expert)."""
    name = f"model.layers.{block}.mlp.shared_expert"
    unit = make_unit(shape.weight_format, name=name, kind="shared-expert", block=block, modules=(name,),
                     matrix_params=params, hidden=shape.hidden)
    return unit.model_copy(update={"nbytes": nbytes, "max_tensor_nbytes": big})


def _file_type(value) -> str | None:
    try:
        from gguf import LlamaFileType
        return LlamaFileType(int(value)).name.removeprefix("MOSTLY_").lower()
    except (TypeError, ValueError, ImportError):
        return None
