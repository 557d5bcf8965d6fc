"""The fast evaluator: the timeline's pipeline as a max-plus recurrence over the same schedule.

It gives the SimPy timeline's compute start and end times exactly (tested to 1e-9 relative) and is much faster.
It refuses what only the SimPy timeline models (several parallel disk readers) rather than guess.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.pagecache import PageCache
from sim.schedule import GPU_LOAD, Schedule


class Unsupported(ValueError):
    """The fast evaluator does not model this plan; use the SimPy timeline."""


@dataclass(frozen=True)
class FastResult:
    c_start: np.ndarray
    c_end: np.ndarray
    ready: np.ndarray       # when each item's weights were usable (0 for no load)
    cache_hits: int
    cache_misses: int


def evaluate(sch: Schedule, prefetch_depth: int, overlap_copy: bool, vram_slots: int, pinned_slots: int,
             reader_threads: int = 1) -> FastResult:
    if reader_threads != 1:
        raise Unsupported("the fast evaluator models one disk reader; parallel readers need the SimPy timeline")
    n = len(sch)
    unit, load, gate = sch.unit, sch.load, sch.gate
    read_b, unpack_s, copy_s, comp_s, pin = sch.read_bytes, sch.unpack_s, sch.copy_s, sch.compute_s, sch.pinned_slot
    lat, cold, warm = sch.read_latency_s, sch.cold_bytes_per_s, sch.cache_bytes_per_s
    cache = PageCache(sch.cache_capacity_bytes, sch.warm_keys)
    c_start = [0.0] * n
    c_end = [0.0] * n
    ready = [0.0] * n
    load_items: list[int] = []
    pin_release: list[float] = []   # copy end of each pinned-slot holder, in acquisition order
    vram_release: list[int] = []    # item index of each VRAM-slot holder, in acquisition order
    P = max(pinned_slots, 1)
    d = prefetch_depth
    reader_free = unpack_free = copier_free = 0.0
    prev_end = 0.0
    for i in range(n):
        if load[i]:
            k = len(load_items)
            load_items.append(i)
            g = 0.0
            if d == 0:
                g = prev_end
            elif k >= d:
                g = c_start[load_items[k - d]]
            if gate[i] >= 0 and c_end[gate[i]] > g:
                g = c_end[gate[i]]
            t = g
            if pin[i] or read_b[i] > 0:      # the reader: one item at a time, in order
                if reader_free > t:
                    t = reader_free
                if pin[i]:
                    j = len(pin_release)
                    pin_release.append(0.0)
                    if j >= P and pin_release[j - P] > t:
                        t = pin_release[j - P]
                if read_b[i] > 0:
                    speed = warm if cache.access(unit[i], read_b[i]) else cold
                    t += lat + read_b[i] / speed
                reader_free = t
            if unpack_s[i] > 0:
                if unpack_free > t:
                    t = unpack_free
                t += unpack_s[i]
                unpack_free = t
            if copier_free > t:                # the copier takes every load in order
                t = copier_free
            if load[i] == GPU_LOAD:
                if not overlap_copy and prev_end > t:
                    t = prev_end
                m = len(vram_release)
                vram_release.append(i)
                if m >= vram_slots:
                    r = c_end[vram_release[m - vram_slots]]
                    if r > t:
                        t = r
                t += copy_s[i]
                if pin[i]:
                    pin_release[-1] = t
            copier_free = t
            ready[i] = t
            start = t if t > prev_end else prev_end
        else:
            start = prev_end
        c_start[i] = start
        prev_end = start + comp_s[i]
        c_end[i] = prev_end
    return FastResult(np.array(c_start), np.array(c_end), np.array(ready), cache.hits, cache.misses)
