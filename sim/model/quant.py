"""A checkpoint's `quantization_config` -> its weight format in bits per weight, scales and zeros included.

Each formula counts what the packed layout stores per weight of a quantized matrix (sources in the docstrings of
the functions below). Embeddings and the LM head stay 16-bit in these formats (GPTQ, AWQ and bitsandbytes skip
them, FP8 and MXFP4 checkpoints keep them in bf16), so `KEEP_16BIT` names those unit kinds.
"""
from __future__ import annotations

from hwmodels.units import InputError
from sim.model.formats import WeightFormat

KEEP_16BIT = frozenset({"embedding", "lm_head"})


def grouped_int_bits(bits: int, group_size: int) -> float:
    """GPTQ and AWQ: `bits` per weight, plus one fp16 scale and one `bits`-wide packed zero per group.

    AutoGPTQ QuantLinear stores qweight int32 [in*bits/32, out], qzeros int32 [in/g, out*bits/32], scales fp16
    [in/g, out]; AutoAWQ WQLinear_GEMM stores the same three (qweight [in, out*bits/32]). So bits + (16 + bits) / g;
    per-channel (group_size -1) counts no group overhead. GPTQ's g_idx (int32 per input row, 32/out bits per weight,
    <0.01 for out >= 4096) is left out.
    """
    return float(bits) if group_size <= 0 else bits + (16 + bits) / group_size


def bnb_4bit_bits(double_quant: bool, blocksize: int = 64) -> float:
    """bitsandbytes NF4/FP4: 4 bits plus an fp32 absmax per 64 weights (4.5); with double quantization the absmax
    is 8-bit with an fp32 scale per 256 absmax values: 4 + 8/64 + 32/(64*256) = 4.127 (QLoRA paper, sec. 3)."""
    return 4 + (8 / blocksize + 32 / (blocksize * 256) if double_quant else 32 / blocksize)


def fp8_bits(block: list | None) -> float:
    """FP8: 8 bits plus one fp32 scale per [128, 128] block when `weight_block_size` is given (DeepSeek-V3,
    Qwen3-FP8), else a per-tensor scale (counted as 0)."""
    if block and len(block) == 2:
        return 8 + 32 / (int(block[0]) * int(block[1]))
    return 8.0


def mxfp4_bits(block: int = 32) -> float:
    """MXFP4 (OCP microscaling, gpt-oss): 4-bit E2M1 values with one 8-bit E8M0 scale per 32: 4.25."""
    return 4 + 8 / block


def _int(q: dict, keys: tuple[str, ...], default, source: str, low: int, high: int) -> int:
    for key in keys:
        if key in q:
            value = q[key]
            if isinstance(value, bool) or not isinstance(value, int) or not (low <= value <= high or value == -1):
                raise InputError(f"{source}: quantization_config field {key!r} is {str(value)[:30]!r}; it must be "
                                 f"a whole number from {low} to {high} (or -1).")
            return value
    return default


def format_from_quant(q: dict, source: str = "config.json") -> WeightFormat:
    """The weight format a `quantization_config` describes; InputError naming the method when unknown."""
    method = str(q.get("quant_method", "")).lower()
    if method in ("gptq", "awq"):
        bits = _int(q, ("bits", "w_bit"), 4, source, 2, 8)
        group = _int(q, ("group_size", "q_group_size"), 128, source, 1, 1 << 20)
        return WeightFormat(name=f"{method}-int{bits}-g{group}", bits_per_weight=grouped_int_bits(bits, group))
    if method == "bitsandbytes":
        if q.get("load_in_4bit") or q.get("_load_in_4bit"):
            kind = str(q.get("bnb_4bit_quant_type", "fp4")).lower()
            double = bool(q.get("bnb_4bit_use_double_quant", False))
            return WeightFormat(name=f"bnb-{kind}{'-dq' if double else ''}", bits_per_weight=bnb_4bit_bits(double))
        if q.get("load_in_8bit") or q.get("_load_in_8bit"):
            return WeightFormat(name="bnb-int8", bits_per_weight=8.0)  # LLM.int8: int8 + fp32 row scale (~0 per weight)
        raise InputError(f"{source}: quantization_config of bitsandbytes sets neither load_in_4bit nor load_in_8bit; "
                         "set one, or drop the quantization_config.")
    if method == "fp8":
        return WeightFormat(name="fp8", bits_per_weight=fp8_bits(q.get("weight_block_size")))
    if method == "mxfp4":
        return WeightFormat(name="mxfp4", bits_per_weight=mxfp4_bits())
    if method == "compressed-tensors":
        return _compressed_tensors(q, source)
    raise InputError(f"{source}: quantization_config quant_method {method[:30]!r} is not supported; supported: awq, "
                     "bitsandbytes, compressed-tensors, fp8, gptq, mxfp4; or give --dtype BITS for its bits per weight.")


def _compressed_tensors(q: dict, source: str) -> WeightFormat:
    """llm-compressor: the first config group's weights (num_bits, group_size); fp8 or int with fp16 group scales
    (+ a zero per group when asymmetric)."""
    groups = q.get("config_groups") or {}
    first = next(iter(groups.values()), {}) if isinstance(groups, dict) else {}
    w = first.get("weights") if isinstance(first, dict) else None
    if not isinstance(w, dict):
        raise InputError(f"{source}: compressed-tensors quantization_config has no config_groups.*.weights; give "
                         "--dtype BITS for its bits per weight.")
    bits = _int(w, ("num_bits",), 8, source, 2, 16)
    group = _int(w, ("group_size",), -1, source, 1, 1 << 20) if w.get("strategy") == "group" else -1
    per_group = (16 + (0 if w.get("symmetric", True) else bits)) / group if group and group > 0 else 0.0
    kind = str(w.get("type", "int"))
    return WeightFormat(name=f"ct-{kind}{bits}" + (f"-g{group}" if group > 0 else ""), bits_per_weight=bits + per_group)
