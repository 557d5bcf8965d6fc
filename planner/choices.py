"""Where a unit can be: each storage tier computed on the GPU, or a host tier computed on the CPU."""
from __future__ import annotations

from sim.costs.tiers import TIER_ROWS, TIERS

GPU_OPTIONS = TIERS
OPTIONS: tuple[tuple[str, str], ...] = tuple((t, "gpu") for t in GPU_OPTIONS) + tuple(
    (t, "cpu") for t, row in TIER_ROWS.items() if row.cpu_computable)
