"""Measured tables that a calibration run adds to a machine: compute time per unit kind and copy speed by size.

A `ComputeGrid` holds the seconds one unit of one architecture takes on one device, timed inside the engine as it
runs (back to back, through its own dispatch path), over batch x prompt tokens (prefill, empty cache) and batch x
context (decode, one new token), either as CUDA graphs (offloadsim's engine) or eagerly (the peers). The simulator
interpolates it (sim/costs/compute.py). An `H2DPoint` is one measured
host-to-device copy size with its pinned and pageable speeds.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class UnitSignature(_Spec):
    """What makes two units compute alike: family (norms, launch pattern), kind and the shapes that set the work."""
    family: str = Field(description="config.json model_type, e.g. 'llama' or 'qwen3'.")
    kind: str = Field(description="Unit kind: embedding, decoder, lm_head, ...")
    nbytes: int = Field(ge=0, description="Stored bytes (the weight format: a bf16 grid says nothing of int4).")
    flop_params: int = Field(ge=0, description="Parameters multiplied per token.")
    attn_flops_per_ctx_token: int = Field(ge=0, description="Attention FLOPs per query per context token.")
    hidden: int = Field(ge=0, description="Hidden size.")


class ComputeGrid(_Spec):
    unit: UnitSignature
    device: Literal["gpu", "cpu"] = Field(description="Where the unit was computed.")
    dispatch: Literal["eager", "graph"] = Field(
        default="eager", description="How the kernels were launched: 'graph' (offloadsim's engine replays one CUDA "
                                     "graph per unit) or 'eager' (one launch per kernel, as the peers run).")
    memory: Literal["vram", "pageable", "pinned"] | None = Field(
        default=None, description="Where the unit's weights sat while it was timed: 'vram' (GPU grids), 'pageable' or "
                                  "'pinned' host memory (CPU grids; a CPU unit is priced by the grid of its tier). "
                                  "None: not recorded, read as VRAM on the GPU and pageable RAM on the CPU.")
    batch: tuple[PositiveInt, ...] = Field(description="Batch sizes measured, ascending.")
    prefill_tokens: tuple[PositiveInt, ...] = Field(description="Prompt lengths measured (empty cache), ascending.")
    prefill_s: tuple[tuple[PositiveFloat, ...], ...] = Field(description="Seconds per unit, [batch][prompt length].")
    decode_context: tuple[PositiveInt, ...] = Field(description="Cache lengths measured for one new token, ascending.")
    decode_s: tuple[tuple[PositiveFloat, ...], ...] = Field(description="Seconds per unit, [batch][context].")
    long_prompts: tuple[PositiveInt, ...] = Field(
        default=(), description="Longer prompts timed at batch 1 alone, ascending, each past the last prefill_tokens "
                                "(CPU grids of the calibrations in lab/data/heldout/heldout-w3072-*.profile.json; "
                                "calibrate no longer times them): not priced from, since one long-prompt point "
                                "drifts with the host by as much as the attention it adds.")
    long_prefill_s: tuple[PositiveFloat, ...] = Field(default=(), description="Seconds per unit for long_prompts.")
    spread: NonNegativeFloat | None = Field(
        default=None, description="When the grid is the median of repeated rounds: the median over its points of "
                                  "(slowest - fastest) / median, the host's own repeatability while it was timed.")
    source: str = Field(default="", description="Machine, date and method of the measurement.")

    @model_validator(mode="after")
    def _shapes(self) -> "ComputeGrid":
        for axis, name in ((self.batch, "batch"), (self.prefill_tokens, "prefill_tokens"),
                           (self.decode_context, "decode_context")):
            if list(axis) != sorted(set(axis)):
                raise ValueError(f"{name} must be strictly ascending, got {list(axis)}")
        for table, cols, name in ((self.prefill_s, self.prefill_tokens, "prefill_s"),
                                  (self.decode_s, self.decode_context, "decode_s")):
            if len(table) != len(self.batch) or any(len(row) != len(cols) for row in table):
                raise ValueError(f"{name} must be [len(batch)={len(self.batch)}][{len(cols)}]")
        longs = self.long_prompts
        if len(self.long_prefill_s) != len(longs) or list(longs) != sorted(set(longs)) or \
                (longs and longs[0] <= self.prefill_tokens[-1]):
            raise ValueError(f"long_prompts {list(longs)} must be strictly ascending, past the last prefill_tokens "
                             f"{self.prefill_tokens[-1]}, with one long_prefill_s each ({len(self.long_prefill_s)} given)")
        return self


class H2DPoint(_Spec):
    nbytes: PositiveInt = Field(description="Copy size.")
    pinned_bytes_per_s: PositiveFloat = Field(description="Host-to-device speed from pinned memory at this size.")
    pageable_bytes_per_s: PositiveFloat = Field(description="Host-to-device speed from pageable memory at this size.")
