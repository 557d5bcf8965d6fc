"""Where a unit can be: each storage tier computed on the GPU, or a host tier computed on the CPU."""
from __future__ import annotations

from sim.costs.equations import TIERS

GPU_OPTIONS = TIERS
OPTIONS: tuple[tuple[str, str], ...] = tuple((t, "gpu") for t in GPU_OPTIONS) + (
    ("ram_pinned", "cpu"), ("ram_pageable", "cpu"), ("disk_raw", "cpu"))
