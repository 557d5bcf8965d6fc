"""Weight storage formats as bits per weight (scales included for block-quantized formats)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat

from hwmodels.units import InputError


class WeightFormat(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(description="Format name, e.g. bf16 or q4_k_m.")
    bits_per_weight: PositiveFloat = Field(description="Stored bits per matrix weight, block scales included.")

    def matrix_nbytes(self, params: int) -> int:
        return int(-(-params * self.bits_per_weight // 8))


# Norms, biases and routers stay 16-bit in every quantized format (as llama.cpp and FP8 checkpoints keep them).
SMALL_PARAM_BYTES = 2

FORMATS = {
    "bf16": 16.0, "fp16": 16.0, "fp8": 8.0, "int8": 8.0,
    "q8_0": 8.5,     # GGUF Q8_0: 32 int8 + one fp16 scale per block
    "q4_k_m": 4.5,   # GGUF Q4_K_M-like average including scales
    "q4_0": 4.5, "nf4": 4.127,  # NF4 with fp32 absmax per 64 + double quantization (bitsandbytes)
}


def parse_format(text: str) -> WeightFormat:
    """'bf16' -> 16 bits; a bare number such as '4.5' is bits per weight."""
    key = str(text).strip().lower()
    if key in FORMATS:
        return WeightFormat(name=key, bits_per_weight=FORMATS[key])
    try:
        bits = float(key)
    except ValueError:
        raise InputError(f"dtype: unknown weight format {text!r}; use one of {', '.join(FORMATS)} "
                         "or bits per weight such as 4.5.") from None
    if not 1 <= bits <= 32:
        raise InputError(f"dtype: {text!r} bits per weight is out of range; give a number from 1 to 32.")
    return WeightFormat(name=f"{bits:g}bit", bits_per_weight=bits)
