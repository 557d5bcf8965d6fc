"""The fast evaluator: the timeline's pipeline as a max-plus recurrence over the same schedule.

It gives the SimPy timeline's compute start and end times exactly (tested to 1e-9 relative) and is much faster.
It refuses what only the SimPy timeline models (several parallel disk readers) rather than guess.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.run.pagecache import PageCache
from sim.run.pipeline import known as _known_py, rules
from sim.run.items import GPU_LOAD, Schedule
from sim.run.reads import cache_found


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
    lat, warm = sch.read_latency_s, sch.cache_bytes_per_s
    cold = warm if sch.loader_faults else sch.cold_bytes_per_s  # a faulting loader's cold part is in its wait
    d = prefetch_depth
    r = rules(sch, prefetch_depth, overlap_copy, vram_slots, pinned_slots)
    blocking, pf, pin_src, vram_src = r.blocking, r.window, r.pin_from, r.vram_from
    host = (read_b > 0) | sch.pinned_slot
    found, hits, misses = cache_found(sch)
    c_start, c_end, ready = _recurrence(load, host, read_b, found, unpack_s, copy_s, comp_s, gate, pf, pin_src, vram_src,
                                        d, blocking, lat, cold, warm, sch.startup_s, sch.on_cpu, sch.compute_s,
                                        sch.overhead_s, float(sch.contention), sch.link_at_s, sch.gpu)
    return FastResult(c_start, c_end, ready, hits, misses)


def _contended_py(t, work, f, loads, lo, hi, load, copy_start, ready):
    """When a CPU compute of `work` seconds alone, starting at t, ends: while a copy to the GPU runs it progresses
    at 1/f of its speed (cpu.copy_contention); the copies are those of loads[lo:hi], in order on one copier."""
    for k in range(lo, hi):
        j = loads[k]
        if load[j] != GPU_LOAD:
            continue
        a, b = copy_start[j], ready[j]
        if b <= t:
            continue
        if a > t:
            if work <= a - t:
                return t + work
            work -= a - t
            t = a
        if work * f <= b - t:
            return t + work * f
        work -= (b - t) / f
        t = b
    return t + work


try:
    from numba import njit
    _known, _contended = njit(cache=True)(_known_py), njit(cache=True)(_contended_py)
except ImportError:  # pragma: no cover - numba is a dependency; the plain functions give the same numbers
    njit = None
    _known, _contended = _known_py, _contended_py


def _recurrence_py(load, host, read_b, found, unpack_s, copy_s, comp_s, gate, pf, pin_src, vram_src, d, blocking,
                   lat, cold, warm, startup, on_cpu, work_s, over_s, contention, link_at, gpu):
    """The pipeline as a max-plus recurrence, item by item (compiled by numba when it is installed). `comp_s`: an
    item's time on its compute lane (the engine's overhead, then its compute). Loads are laid out in load order
    through the reader, unpacker and copier lanes, each one before its item's compute; with `contention` != 1 a CPU
    item's compute (`work_s`, after `over_s`) slows while copies run, and an item that needs the link `link_at`
    seconds into its compute waits there for the copier (sim.run.pipeline), so for both first every load already fixed
    when it starts is laid out (`_known`): the copies among them set its end (`_contended`), or the copier's end
    after them its wait. Each GPU (`gpu`, the item's) has its own copier lane; the reader and the unpacker are the
    host's, one each. One code path lays out a load (numba passes arrays to a called function at a
    reference-count cost per call)."""
    n = len(load)
    c_start = np.zeros(n)
    c_end = np.zeros(n)
    ready = np.zeros(n)
    copy_start = np.zeros(n)
    reader_free = unpack_free = 0.0
    copier = np.zeros(gpu.max() + 1 if n else 1)  # each GPU's copier: free from then
    loads = np.flatnonzero(load)
    n_loads = len(loads)
    done = 0                         # loads[:done] are laid out
    after = 0                        # loads[after:] are of items after the current one
    prev_end = 0.0
    for i in range(n):
        contended = contention != 1.0 and on_cpu[i] and d >= 1
        linked = link_at[i] >= 0
        started = False
        while True:
            go = False
            if done < n_loads:
                j = loads[done]
                go = (j == i) if not started else _known(j, i, load, gate, pf, vram_src, blocking)
            if not go:
                if started or not (contended or linked and d >= 1):
                    break
                started = True
                c_start[i] = ready[i] if load[i] and ready[i] > prev_end else prev_end
                continue
            t = startup
            if d == 0:
                if prev_end > t:
                    t = prev_end
            else:
                k = pf[j]
                if k >= 0 and c_start[k] > t:
                    t = c_start[k]
            k = gate[j]
            if k >= 0 and c_end[k] > t:
                t = c_end[k]
            if host[j]:                      # the reader: one item at a time, in order
                if reader_free > t:
                    t = reader_free
                k = pin_src[j]
                if k >= 0 and ready[k] > t:  # a pinned slot frees when its holder's copy ends
                    t = ready[k]
                rb = read_b[j]
                if rb > 0:                   # the resident part at the cache speed, the rest from storage
                    t += lat + found[j] / warm + (rb - found[j]) / cold
                reader_free = t
            u = unpack_s[j]
            if u > 0:
                if unpack_free > t:
                    t = unpack_free
                t += u
                unpack_free = t
            if copier[gpu[j]] > t:           # its GPU's copier takes that GPU's loads in order
                t = copier[gpu[j]]
            if load[j] == GPU_LOAD:
                if blocking[j] and prev_end > t:
                    t = prev_end
                k = vram_src[j]
                if k >= 0 and c_end[k] > t:  # a VRAM slot frees when its holder's compute ends
                    t = c_end[k]
                copy_start[j] = t
                t += copy_s[j]
            copier[gpu[j]] = t
            ready[j] = t
            done += 1
        if not started:
            c_start[i] = ready[i] if load[i] and ready[i] > prev_end else prev_end
        if contended:
            while after < n_loads and loads[after] <= i:
                after += 1
            prev_end = _contended(c_start[i] + over_s[i], work_s[i], contention, loads, after, done, load,
                                  copy_start, ready)
        elif linked:                         # the link is free once the copies queued before it are done
            t = c_start[i] + over_s[i] + link_at[i]
            if copier[gpu[i]] > t:
                t = copier[gpu[i]]
            prev_end = t + work_s[i] - link_at[i]
        else:
            prev_end = c_start[i] + comp_s[i]
        c_end[i] = prev_end
    return c_start, c_end, ready


if njit is not None:
    _recurrence = njit(cache=True)(_recurrence_py)
else:  # pragma: no cover
    _recurrence = _recurrence_py


def warm_up() -> None:
    """Compile (or load from numba's cache) the recurrence now, so a caller's time budget is spent on work."""
    i, b, f = np.zeros(1, np.int64), np.zeros(1, np.bool_), np.zeros(1)
    _recurrence(i, b, f, f, f, f, f, i - 1, i - 1, i - 1, i - 1, 1, b, 0.0, 1.0, 1.0, 0.0, b, f, f, 2.0, f - 1, i)
    PageCache(1.0, [(0, 1.0, True)]).read_many(i, f + 2.0)
