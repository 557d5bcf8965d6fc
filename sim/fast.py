"""The fast evaluator: the timeline's pipeline as a max-plus recurrence over the same schedule.

It gives the SimPy timeline's compute start and end times exactly (tested to 1e-9 relative) and is much faster.
It refuses what only the SimPy timeline models (several parallel disk readers) rather than guess.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.pagecache import PageCache
from sim.pipeline import rules
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
    load = sch.load
    read_b, unpack_s, copy_s, comp_s, gate = sch.read_bytes, sch.unpack_s, sch.copy_s, sch.compute_s + sch.overhead_s, sch.gate
    lat, cold, warm = sch.read_latency_s, sch.cold_bytes_per_s, sch.cache_bytes_per_s
    d = prefetch_depth
    r = rules(sch, prefetch_depth, overlap_copy, vram_slots, pinned_slots)
    blocking, pf, pin_src, vram_src = r.blocking, r.window, r.pin_from, r.vram_from
    host = (read_b > 0) | sch.pinned_slot
    found, hits, misses = cache_found(sch)
    c_start, c_end, ready = _recurrence(load, host, read_b, found, unpack_s, copy_s, comp_s, gate, pf, pin_src, vram_src,
                                        d, blocking, lat, cold, warm, sch.startup_s)
    return FastResult(c_start, c_end, ready, hits, misses)


def cache_found(sch: Schedule) -> tuple[np.ndarray, int, int]:
    """Bytes of each item's read found in the page cache (0 for no read), hits and misses. They depend only on the
    order of reads, which is the item order here. Without a page cache every read is cold; when every unit read fits
    at once nothing is evicted, so a read finds what the warm start or the unit's earlier reads brought in."""
    read_b = sch.read_bytes
    reads = np.flatnonzero(read_b > 0)
    found = np.zeros(len(sch))
    if sch.cache_capacity_bytes <= 0:
        return found, 0, len(reads)
    units, nbytes = sch.unit[reads], read_b[reads]
    warm_u = np.array([k for k, *_ in sch.warm_keys], dtype=np.int64)
    warm_b = np.array([b for _, b, *_ in sch.warm_keys], dtype=np.float64)
    keys = np.concatenate([warm_u, units])
    uniq, inv = np.unique(keys, return_inverse=True)
    most = np.zeros(len(uniq))
    np.maximum.at(most, inv.reshape(-1), np.concatenate([warm_b, nbytes]))
    if most.sum() * (1 + 1e-9) <= sch.cache_capacity_bytes:  # the margin covers the order of summation
        before = _resident_before(inv.reshape(-1), np.concatenate([warm_b, nbytes]))[len(warm_u):]
        found[reads] = np.minimum(before, nbytes)
    else:
        found[reads] = PageCache(sch.cache_capacity_bytes, sch.warm_keys).read_many(units, nbytes)
    hit = found[reads] >= nbytes
    return found, int(hit.sum()), int(len(reads) - hit.sum())


def _resident_before(key: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """For each entry, the largest `nbytes` of the same key before it (0 for its first): what an LRU that never
    evicts holds of that key. Exact: the running maximum runs over value ranks offset by key, in integers."""
    order = np.lexsort((np.arange(len(key)), key))
    vals, rank = np.unique(nbytes, return_inverse=True)
    rank = rank.reshape(-1)[order] + 1                    # 0 stands for "nothing yet"
    k = key[order]
    offset = k.astype(np.int64) * (len(vals) + 1)
    run = np.maximum.accumulate(rank + offset) - offset   # inclusive running max within each key
    prev = np.zeros(len(key), dtype=np.int64)
    prev[1:] = np.where(k[1:] == k[:-1], run[:-1], 0)
    out = np.empty(len(key))
    out[order] = np.concatenate([[0.0], vals])[prev]
    return out


def _recurrence_py(load, host, read_b, found, unpack_s, copy_s, comp_s, gate, pf, pin_src, vram_src, d, blocking,
                   lat, cold, warm, startup=0.0):
    """The pipeline as a max-plus recurrence, item by item (compiled by numba when it is installed)."""
    n = len(load)
    c_start = np.zeros(n)
    c_end = np.zeros(n)
    ready = np.zeros(n)
    reader_free = 0.0
    unpack_free = 0.0
    copier_free = 0.0
    prev_end = 0.0
    for i in range(n):
        kind = load[i]
        if kind:
            t = startup
            if d == 0:
                if prev_end > t:
                    t = prev_end
            else:
                j = pf[i]
                if j >= 0 and c_start[j] > t:
                    t = c_start[j]
            j = gate[i]
            if j >= 0 and c_end[j] > t:
                t = c_end[j]
            if host[i]:                      # the reader: one item at a time, in order
                if reader_free > t:
                    t = reader_free
                j = pin_src[i]
                if j >= 0 and ready[j] > t:  # a pinned slot frees when its holder's copy ends
                    t = ready[j]
                rb = read_b[i]
                if rb > 0:                   # the resident part at the cache speed, the rest from storage
                    t += lat + found[i] / warm + (rb - found[i]) / cold
                reader_free = t
            u = unpack_s[i]
            if u > 0:
                if unpack_free > t:
                    t = unpack_free
                t += u
                unpack_free = t
            if copier_free > t:              # the copier takes every load in order
                t = copier_free
            if kind == GPU_LOAD:
                if blocking[i] and prev_end > t:
                    t = prev_end
                j = vram_src[i]
                if j >= 0 and c_end[j] > t:  # a VRAM slot frees when its holder's compute ends
                    t = c_end[j]
                t += copy_s[i]
            copier_free = t
            ready[i] = t
            start = t if t > prev_end else prev_end
        else:
            start = prev_end
        c_start[i] = start
        prev_end = start + comp_s[i]
        c_end[i] = prev_end
    return c_start, c_end, ready


try:
    from numba import njit
    _recurrence = njit(cache=True)(_recurrence_py)
except ImportError:  # pragma: no cover - numba is a dependency; the plain loop gives the same numbers
    _recurrence = _recurrence_py


def warm_up() -> None:
    """Compile (or load from numba's cache) the recurrence now, so a caller's time budget is spent on work."""
    i, b, f = np.zeros(1, np.int64), np.zeros(1, np.bool_), np.zeros(1)
    _recurrence(i, b, f, f, f, f, f, i - 1, i - 1, i - 1, i - 1, 1, b, 0.0, 1.0, 1.0, 0.0)
    PageCache(1.0, [(0, 1.0, True)]).read_many(i, f + 2.0)
