"""Compute time of a unit on the GPU or the CPU for one workload step.

Where the machine carries a measured grid for the unit's architecture and kind (calibrate, timed inside the engine),
the time is interpolated from it: linear between measured points, linear extrapolation above the largest, clamped
below the smallest. Otherwise the roofline with per-launch overheads, whose parameters carry sources.
"""
from __future__ import annotations

import functools

import numpy as np
from scipy.interpolate import RegularGridInterpolator

from hwmodels.profiles import ComputeGrid, UnitSignature
from hwmodels.specs import MachineSpec
from sim.equations import roofline_s
from sim.shapes import UnitShape


def signature(unit: UnitShape, family: str) -> UnitSignature:
    return UnitSignature(family=family, kind=unit.kind, flop_params=unit.flop_params,
                         attn_flops_per_ctx_token=unit.attn_flops_per_ctx_token, hidden=unit.hidden)


def find_grid(machine: MachineSpec, unit: UnitShape, family: str, device: str) -> ComputeGrid | None:
    sig = signature(unit, family)
    return next((g for g in machine.compute_grids if g.device == device and g.unit == sig), None)


@functools.lru_cache(maxsize=256)
def _interpolators(grid: ComputeGrid) -> tuple[RegularGridInterpolator, RegularGridInterpolator]:
    def make(cols, table):
        x, y = np.asarray(grid.batch, float), np.asarray(cols, float)
        v = np.asarray(table, float)
        if len(x) == 1:  # a single measured batch: duplicate it so the grid is two-dimensional (flat in batch)
            x, v = np.array([x[0], x[0] + 1.0]), np.vstack([v, v])
        if len(y) == 1:
            y, v = np.array([y[0], y[0] + 1.0]), np.hstack([v, v])
        return RegularGridInterpolator((x, y), v, method="linear", bounds_error=False, fill_value=None)
    return make(grid.prefill_tokens, grid.prefill_s), make(grid.decode_context, grid.decode_s)


def grid_time_s(grid: ComputeGrid, batch: int, new_tokens: int, context: int) -> float:
    """Seconds for one unit: prefill(batch, new) with an empty cache, decode(batch, context) for one new token;
    a chunk of several new tokens after a context adds the decode's context cost to the prefill of the chunk."""
    pre, dec = _interpolators(grid)
    b = max(batch, grid.batch[0])

    def at(f, cols, y):
        return float(f([[b, max(y, cols[0])]])[0])
    if context == 0:
        t = at(pre, grid.prefill_tokens, new_tokens) if new_tokens > 1 else at(dec, grid.decode_context, 0)
    elif new_tokens == 1:
        t = at(dec, grid.decode_context, context)
    else:
        t = at(pre, grid.prefill_tokens, new_tokens) + new_tokens * max(
            at(dec, grid.decode_context, context) - at(dec, grid.decode_context, 0), 0.0)
    return max(t, min(min(r) for r in grid.decode_s) * 0.5)


def gpu_compute_s(unit: UnitShape, machine: MachineSpec, batch: int, new_tokens: int, context: int,
                  family: str = "") -> float:
    grid = find_grid(machine, unit, family, "gpu") if machine.compute_grids else None
    if grid is not None:
        return grid_time_s(grid, batch, new_tokens, context)
    g = machine.gpu
    return roofline_s(unit.flops(batch, new_tokens, context), unit.bytes_touched(batch, new_tokens, context),
                      g.bf16_flops_per_s, g.vram_bytes_per_s, unit.launches * g.kernel_overhead_s)


def cpu_compute_s(unit: UnitShape, machine: MachineSpec, batch: int, new_tokens: int, context: int,
                  family: str = "") -> float:
    grid = find_grid(machine, unit, family, "cpu") if machine.compute_grids else None
    if grid is not None:
        return grid_time_s(grid, batch, new_tokens, context)
    c = machine.cpu
    return roofline_s(unit.flops(batch, new_tokens, context), unit.bytes_touched(batch, new_tokens, context),
                      c.flops_per_s, c.memory_bytes_per_s, unit.launches * c.op_overhead_s)


def compute_sources(units, machine: MachineSpec, family: str) -> dict[str, str]:
    """Per unit kind and device: 'profile' (measured grid) or 'roofline'."""
    out = {}
    if not machine.compute_grids:
        return {f"{u.kind}@{dev}": "roofline" for u in units for dev in ("gpu", "cpu")}
    for u in units:
        for dev in ("gpu", "cpu"):
            out.setdefault(f"{u.kind}@{dev}", "profile" if find_grid(machine, u, family, dev) else "roofline")
    return out
