"""The pipeline's rules in one place: for every item, which earlier item's event releases each stage of its load.

A load runs read (storage) -> unpack -> copy (link) -> compute (GPU or CPU), every queue in item order, and:
- `window[i]`: with prefetch depth d >= 1 the load may start when the compute of the d-th load before it *starts*;
- `after[i]`: with depth 0 it starts when the previous item's compute *ends*;
- `gate[i]` (the schedule's column): a routed expert's load waits for its router's compute to end;
- `pin_from[i]`: its pinned staging slot is the one freed when that item's copy ends (P slots, round robin);
- `vram_from[i]`: its VRAM slot is the one freed when that item's compute ends (V slots, round robin);
- `blocking[i]`: its copy waits for the previous item's compute to end (a blocking copy, or pageable memory).
The SimPy timeline, the fast evaluator and the engine all take these from `rules()`; -1 means no such wait.
One resource is shared rather than queued: host memory. While the copy engine runs, CPU compute progresses at
1 / `Schedule.contention` of its speed (cpu.copy_contention, measured by calibrate as a CPU layer's time beside
copies); the timeline arbitrates it as `HostMemory`, the fast evaluator lays out the copies already fixed when a
CPU item starts and integrates its work across them (exact: a copy not yet fixed starts after that item ends).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.schedule import GPU_LOAD, Schedule


@dataclass(frozen=True)
class Rules:
    loads: np.ndarray      # items with a load, in order
    window: np.ndarray
    after: np.ndarray
    pin_from: np.ndarray
    vram_from: np.ndarray
    blocking: np.ndarray


def _round_robin(items: np.ndarray, slots: int, n: int) -> np.ndarray:
    src = np.full(n, -1)
    if len(items) > slots:
        src[items[slots:]] = items[:-slots]
    return src


def rules(sch: Schedule, prefetch_depth: int, overlap_copy: bool, vram_slots: int, pinned_slots: int) -> Rules:
    n = len(sch)
    loads = np.flatnonzero(sch.load)
    window, after = np.full(n, -1), np.full(n, -1)
    if prefetch_depth >= 1:
        window = _round_robin(loads, prefetch_depth, n)
    else:
        after[loads[loads > 0]] = loads[loads > 0] - 1
    blocking = sch.blocking if overlap_copy else (sch.load == GPU_LOAD)
    return Rules(loads=loads, window=window, after=after,
                 pin_from=_round_robin(np.flatnonzero(sch.pinned_slot), max(pinned_slots, 1), n),
                 vram_from=_round_robin(np.flatnonzero(sch.load == GPU_LOAD), vram_slots, n),
                 blocking=np.asarray(blocking, dtype=np.bool_))
