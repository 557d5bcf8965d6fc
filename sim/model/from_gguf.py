"""A GGUF file (llama.cpp's format) -> ModelShape with the exact stored bytes of every unit.

The `gguf` package's reader gives the metadata and each tensor's name, type and bytes (no weights are read). The
metadata is mapped to the config.json fields the family builders take (sim/model/families.py), which give the units,
parameters, FLOPs and KV bytes; then each unit's nbytes is replaced by the bytes of its tensors:
`blk.{i}.*` -> block i (its attention unit for MoE), the fused `*_exps` tensors split evenly over the experts (the
expert is the outermost axis, so each slice is whole quant blocks), `*_shexp` -> the shared experts,
`token_embd.*` and tensors of no block -> the embedding, `output*` -> the head (the embedding's bytes when tied).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from hwmodels.units import InputError
from sim.model.families import shape_from_config
from sim.model.formats import WeightFormat
from sim.model.shapes import ModelShape

# GGUF general.architecture -> config.json model_type (llama with experts is Mixtral's layout)
ARCH = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3", "qwen2moe": "qwen2_moe",
        "qwen3moe": "qwen3_moe"}
MAX_TENSORS = 1_000_000


def _fail(path: Path, why: str) -> InputError:
    return InputError(f"model: {str(path)!r} {why}; give an intact .gguf file (re-download it) or a config.json.")


def read_gguf(path: Path) -> tuple[dict, dict[str, tuple[str, int, int]]]:
    """(metadata key -> value, tensor name -> (type name, bytes, elements)); one sentence on any unreadable file."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise InputError("model: reading .gguf files needs the 'gguf' package; run 'pip install gguf'.") from None
    try:
        reader = GGUFReader(str(path), "r")
        meta = {}
        for key, field in reader.fields.items():
            if key.startswith("tokenizer.ggml.") and key != "tokenizer.ggml.model":
                continue  # token lists are large and not needed
            try:
                meta[key] = field.contents()
            except Exception:  # noqa: BLE001  (a field type the reader cannot decode: not one we need)
                continue
        tensors = {t.name: (t.tensor_type.name, int(t.n_bytes), int(t.n_elements)) for t in reader.tensors}
    except InputError:
        raise
    except MemoryError:
        raise _fail(path, "claims more data than fits in memory") from None
    except Exception as exc:  # noqa: BLE001  (the reader raises ValueError, KeyError, struct and numpy errors)
        raise _fail(path, f"is not a readable GGUF file ({type(exc).__name__}: {str(exc)[:80]})") from None
    if not tensors:
        raise _fail(path, "holds no tensors")
    if len(tensors) > MAX_TENSORS:
        raise _fail(path, f"holds {len(tensors):,} tensors, more than any model")
    return meta, tensors


def config_from_gguf(meta: dict, tensors: dict[str, tuple[str, int, int]], source: str) -> dict:
    """The config.json fields of the family builders, from GGUF metadata."""
    arch = meta.get("general.architecture")
    experts = meta.get(f"{arch}.expert_count") or 0
    model_type = "mixtral" if arch == "llama" and experts else ARCH.get(arch)
    if model_type is None:
        raise InputError(f"{source}: GGUF architecture {str(arch)[:40]!r} is not supported; supported: "
                         f"{', '.join(sorted(ARCH))}.")

    def need(key: str):
        value = meta.get(f"{arch}.{key}")
        if value is None:
            raise InputError(f"{source}: GGUF metadata '{arch}.{key}' is missing; the file was not written by a "
                             "complete converter, re-convert it with llama.cpp's convert_hf_to_gguf.py.")
        return value

    h = need("embedding_length")
    embd = tensors.get("token_embd.weight")
    cfg = {"model_type": model_type, "_name_or_path": meta.get("general.name") or Path(source).stem,
           "num_hidden_layers": need("block_count"), "hidden_size": h,
           "num_attention_heads": need("attention.head_count"),
           "num_key_value_heads": meta.get(f"{arch}.attention.head_count_kv") or need("attention.head_count"),
           "vocab_size": meta.get(f"{arch}.vocab_size") or 0, "tie_word_embeddings": "output.weight" not in tensors}
    if meta.get(f"{arch}.attention.key_length"):
        cfg["head_dim"] = meta[f"{arch}.attention.key_length"]
    if experts:
        cfg["num_experts_per_tok"] = need("expert_used_count")
        if model_type == "mixtral":
            cfg["num_local_experts"], cfg["intermediate_size"] = experts, need("feed_forward_length")
        else:
            cfg["num_experts"], cfg["moe_intermediate_size"] = experts, need("expert_feed_forward_length")
    else:
        cfg["intermediate_size"] = need("feed_forward_length")
    if not cfg["vocab_size"] and embd is not None:
        cfg["vocab_size"] = embd[2] // max(int(h), 1)
    if not cfg["vocab_size"]:
        raise InputError(f"{source}: neither '{arch}.vocab_size' nor token_embd.weight gives the vocabulary size; "
                         "re-convert the file.")
    if any(k.startswith("blk.0.attn_q.bias") for k in tensors) and model_type == "llama":
        cfg["attention_bias"] = True
    return cfg


def _unit_of(name: str, n_blocks: int) -> tuple[int | None, str]:
    """(block index or None, part) of a GGUF tensor name: part is 'exps', 'shexp' or 'rest'."""
    if name.startswith("blk."):
        idx, _, rest = name[4:].partition(".")
        if idx.isdigit() and int(idx) < n_blocks:
            return int(idx), "exps" if "_exps" in rest else "shexp" if "_shexp" in rest else "rest"
    if name.startswith("output"):
        return n_blocks, "rest"
    return -1, "rest"


def shape_from_gguf(path: Path) -> ModelShape:
    """ModelShape of a GGUF file, every unit's nbytes the exact bytes of its tensors."""
    meta, tensors = read_gguf(path)
    source = str(path)
    cfg = config_from_gguf(meta, tensors, source)
    types = Counter(t[0] for name, t in tensors.items() if name.endswith(".weight") and "norm" not in name)
    shape = shape_from_config(cfg, WeightFormat(name="gguf", bits_per_weight=16.0), source=source)
    n_blocks = shape.n_blocks
    blocks: dict[tuple[int, str], int] = Counter()
    largest: dict[tuple[int, str], int] = Counter()  # each part's largest tensor (llama.cpp copies one at a time)
    for name, (_, nbytes, _) in tensors.items():
        part = _unit_of(name, n_blocks)
        blocks[part] += nbytes
        largest[part] = max(largest[part], nbytes)
    n_exp = shape.n_routed_experts
    units, emb_bytes = [], blocks[(-1, "rest")]
    for u in shape.units:
        if u.kind == "embedding":
            nbytes, tied, big = emb_bytes, 0, largest[(-1, "rest")]
        elif u.kind == "lm_head":
            tied = tensors["token_embd.weight"][1] if cfg["tie_word_embeddings"] and "token_embd.weight" in tensors else 0
            nbytes, big = blocks[(n_blocks, "rest")] + tied, max(largest[(n_blocks, "rest")], tied)
        elif u.kind == "expert":
            nbytes, tied, big = blocks[(u.block, "exps")] // n_exp, 0, largest[(u.block, "exps")] // n_exp
        elif u.kind == "shared-expert":
            nbytes, tied, big = blocks[(u.block, "shexp")], 0, largest[(u.block, "shexp")]
        else:
            nbytes, tied = blocks[(u.block, "rest")] + (0 if n_exp else blocks[(u.block, "exps")]), 0
            big = max(largest[(u.block, "rest")], 0 if n_exp else largest[(u.block, "exps")])
        if nbytes <= 0:
            raise InputError(f"{source}: no tensor of the file belongs to unit {u.name!r} (block {u.block}); the "
                             "file's tensors do not match its metadata, re-convert it.")
        units.append(u.model_copy(update={"nbytes": nbytes, "tied_nbytes": tied, "max_tensor_nbytes": big}))
    matrix = sum(u.matrix_params for u in shape.units) or 1
    stored = sum(u.nbytes - u.tied_nbytes for u in units)
    label = meta.get("general.file_type")
    fmt_name = _file_type(label) or (types.most_common(1)[0][0].lower() if types else "gguf")
    fmt = WeightFormat(name=fmt_name, bits_per_weight=min(max(stored * 8 / matrix, 1.0), 32.0))
    return shape.model_copy(update={"units": tuple(units), "weight_format": fmt})


def _file_type(value) -> str | None:
    try:
        from gguf import LlamaFileType
        return LlamaFileType(int(value)).name.removeprefix("MOSTLY_").lower()
    except (TypeError, ValueError, ImportError):
        return None
