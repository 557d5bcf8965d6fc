"""Summaries computed after a run: time to first token, time per token, stalls by cause, busy fractions, memory."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from sim.run.events import Event
from sim.costs.memory import MemoryUse
from sim.run.items import Schedule


def step_times(sch: Schedule, c_end: np.ndarray) -> tuple[float, float, float]:
    """(ttft_s, time_per_token_s, total_s); with one token, time per token is the time to first token."""
    steps = np.asarray(sch.step)
    ends = np.zeros(sch.n_steps)
    np.maximum.at(ends, steps, c_end)
    ttft = float(ends[0])
    total = float(ends[-1])
    tpot = (total - ttft) / (sch.n_steps - 1) if sch.n_steps > 1 else ttft
    return ttft, tpot, total


def wait_causes(events: list[Event]) -> dict[str, float]:
    """Split every compute wait by what the awaited load was doing: cold read, cached read, unpack, copy,
    or queued behind other loads (slots, the copy engine, the prefetch window). A wait that carries its cause (the
    engine's host cost before a unit's kernels: hooks, a peer's cleanup, its generation loop) counts under it, less
    what a load of the unit overlaps (AirLLM's loader faulting its weights in: a cold read)."""
    stages: dict[tuple[int, str], list[Event]] = defaultdict(list)
    waits = []
    for e in events:
        if e.stage == "wait":
            waits.append(e)
        elif e.stage != "compute":
            stages[(e.token, e.unit)].append(e)
    causes: dict[str, float] = defaultdict(float)
    for w in waits:
        left = w.duration_s
        for e in stages.get((w.token, w.unit), []):
            overlap = max(0.0, min(w.end_s, e.end_s) - max(w.start_s, e.start_s))
            if overlap > 0:
                label = f"read_{e.detail}" if e.stage == "read" else e.stage
                causes[label] += overlap
                left -= overlap
        if left > 1e-12:
            causes[w.detail or "queued"] += left
    return dict(causes)


def busy_fractions(events: list[Event], total_s: float) -> dict[str, float]:
    busy: dict[str, float] = defaultdict(float)
    for e in events:
        if e.stage != "wait":
            busy[e.resource] += e.duration_s
    return {k: v / total_s for k, v in busy.items()} if total_s > 0 else {}


def work_by_resource(sch: Schedule) -> dict[str, float]:
    """Seconds each resource works over the request (reads at the cold speed: an upper bound on the disk)."""
    reads = float(np.sum(sch.read_bytes) / sch.cold_bytes_per_s)
    return {"gpu": float(np.sum(sch.compute_s[~sch.on_cpu])), "cpu": float(np.sum(sch.compute_s[sch.on_cpu])),
            "copy": float(np.sum(sch.copy_s)), "unpack": float(np.sum(sch.unpack_s)), "storage": reads}


def summary(sch: Schedule, c_start: np.ndarray, c_end: np.ndarray, mem: MemoryUse, hits: int, misses: int,
            events: list[Event] | None = None) -> dict:
    ttft, tpot, total = step_times(sch, c_end)
    steps = np.asarray(sch.step)
    prev = np.concatenate([[0.0], c_end[:-1]])
    gaps = np.maximum(c_start - prev, 0.0)
    out = {
        "ttft_s": ttft, "time_per_token_s": tpot, "total_s": total, "tokens_per_s": 1.0 / tpot if tpot > 0 else None,
        "stall_s": float(gaps.sum()), "stall_prefill_s": float(gaps[steps == 0].sum()),
        "stall_per_token_s": float(gaps[steps > 0].sum() / max(sch.n_steps - 1, 1)),
        "compute_s": float(np.sum(c_end - c_start)),
        "peak_vram_bytes": mem.vram_bytes, "peak_pinned_bytes": mem.pinned_bytes,
        "peak_ram_bytes": mem.ram_weights_bytes + mem.pinned_bytes + mem.host_kv_bytes,  # the CPU layers' KV too
        "page_cache_bytes": mem.page_cache_bytes,
        "page_cache_hits": hits, "page_cache_misses": misses, "items": len(sch),
        "work_s": work_by_resource(sch),
    }
    out["bottleneck"] = max(out["work_s"], key=out["work_s"].get)
    if events is not None:
        out["events"] = len(events)
        out["stall_by_cause_s"] = wait_causes(events)
        out["busy_fraction"] = busy_fractions(events, total)
    return out
