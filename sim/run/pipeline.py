"""The pipeline's rules in one place: for every item, which earlier item's event releases each stage of its load.

A load runs read (storage) -> unpack -> copy (link) -> compute (GPU or CPU), every queue in item order, and:
- `window[i]`: with prefetch depth d >= 1 the load may start when the compute of the d-th load before it *starts*;
- `after[i]`: with depth 0 it starts when the previous item's compute *ends*;
- `gate[i]` (the schedule's column): a routed expert's load waits for its router's compute to end;
- `pin_from[i]`: its pinned staging slot is the one freed when that item's copy ends (P slots, round robin);
- `vram_from[i]`: its VRAM slot is the one freed when that item's compute ends (V slots, round robin);
- `blocking[i]`: its copy waits for the previous item's compute to end (a blocking copy, or pageable memory).
The SimPy timeline, the fast evaluator and the engine all take these from `rules()`; -1 means no such wait.
An item that needs the link itself (`link_at_s`: a CPU-held unit multiplied on the GPU moves its cache there,
validate/stream_run.py) waits, that far into its compute, for the copies of every load fixed when its compute started
(`known`): those were queued on the link before it (measured on the H200, lab/data/validation/matrix/matrix-o.json: the
transfer waited for the weight copy in flight, one engine per direction). Nothing queued after it starts before its
compute ends.
One resource is shared rather than queued: host memory. While the copy engine runs, CPU compute progresses at
1 / `Schedule.contention` of its speed (cpu.copy_contention, measured by calibrate as a CPU layer's time beside
copies); the timeline arbitrates it as `HostMemory`, the fast evaluator lays out the copies already fixed when a
CPU item starts and integrates its work across them (exact: a copy not yet fixed starts after that item ends).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.run.items import GPU_LOAD, Schedule


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


def _per_gpu(items: np.ndarray, slots: int, n: int, gpu: np.ndarray) -> np.ndarray:
    """_round_robin over each GPU's own items: every GPU has its own slots and prefetch window."""
    if len(items) == 0 or not gpu[items].any():
        return _round_robin(items, slots, n)
    src = np.full(n, -1)
    for g in np.unique(gpu[items]).tolist():
        mine = items[gpu[items] == g]
        src = np.maximum(src, _round_robin(mine, slots, n))
    return src


def rules(sch: Schedule, prefetch_depth: int, overlap_copy: bool, vram_slots: int, pinned_slots: int) -> Rules:
    n = len(sch)
    loads = np.flatnonzero(sch.load)
    window, after = np.full(n, -1), np.full(n, -1)
    if prefetch_depth >= 1:
        window = _per_gpu(loads, prefetch_depth, n, sch.gpu)
    else:
        after[loads[loads > 0]] = loads[loads > 0] - 1
    blocking = sch.blocking if overlap_copy else (sch.load == GPU_LOAD)
    return Rules(loads=loads, window=window, after=after,
                 pin_from=_round_robin(np.flatnonzero(sch.pinned_slot), max(pinned_slots, 1), n),
                 vram_from=_per_gpu(np.flatnonzero(sch.load == GPU_LOAD), vram_slots, n, sch.gpu),
                 blocking=np.asarray(blocking, dtype=np.bool_))


def known(j, i, load, gate, pf, vram_src, blocking):
    """Whether load j (> i) is fixed once item i's compute has started: every event it waits for is a compute start
    of an item <= i or a compute end of an item < i (d >= 1; a copy that waits for a later event starts after item
    i's compute ends, and every later load copies after it)."""
    if pf[j] > i or gate[j] >= i:
        return False
    if load[j] == GPU_LOAD and (blocking[j] or vram_src[j] >= i):
        return False
    return True


def link_after(sch: Schedule, r: Rules, prefetch_depth: int) -> np.ndarray:
    """Per item that needs the link (link_at_s >= 0): the last load fixed when its compute starts, whose copy it
    waits for (the loads up to its own, then, with prefetch, the run of later loads `known` then); -1 elsewhere."""
    out = np.full(len(sch), -1)
    loads = r.loads
    for i in np.flatnonzero(np.asarray(sch.link_at_s) >= 0).tolist():
        k = int(np.searchsorted(loads, i, side="right"))
        while prefetch_depth >= 1 and k < len(loads) and known(loads[k], i, sch.load, sch.gate, r.window,
                                                               r.vram_from, r.blocking):
            k += 1
        out[i] = loads[k - 1] if k > 0 else -1
    return out
