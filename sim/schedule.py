"""The execution sequence shared by the SimPy timeline and the fast evaluator.

Each item is one unit computed at one step (token). Loads (read -> unpack -> copy) and compute durations are
precomputed here; only page-cache hits depend on the order of reads, which both engines replay identically.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hwmodels.specs import MachineSpec
from sim.compute import cpu_compute_s, gpu_compute_s
from sim.memory import MemoryUse, check_plan
from sim.plan import Budgets, Plan, Workload
from sim.routing import ExpertRouter
from sim.shapes import ModelShape

GPU_LOAD, CPU_READ = 1, 2
COLUMNS = {"unit": np.int64, "step": np.int64, "on_cpu": np.bool_, "load": np.int64, "read_bytes": np.float64,
           "unpack_s": np.float64, "copy_s": np.float64, "copy_bytes": np.float64, "compute_s": np.float64,
           "pinned_slot": np.bool_, "gate": np.int64}


@dataclass
class Schedule:
    """Columns, one entry per item, in execution order."""
    names: list[str] = field(default_factory=list)       # unit names (index by unit)
    unit: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    on_cpu: list[bool] = field(default_factory=list)
    load: list[int] = field(default_factory=list)        # 0, GPU_LOAD or CPU_READ
    read_bytes: list[float] = field(default_factory=list)  # stored bytes read from disk (0: no read)
    unpack_s: list[float] = field(default_factory=list)
    copy_s: list[float] = field(default_factory=list)
    copy_bytes: list[float] = field(default_factory=list)
    compute_s: list[float] = field(default_factory=list)
    pinned_slot: list[bool] = field(default_factory=list)
    gate: list[int] = field(default_factory=list)        # item whose compute end gates this load (router), or -1
    n_steps: int = 0
    read_latency_s: float = 0.0
    cold_bytes_per_s: float = 1.0
    cache_bytes_per_s: float = 1.0
    cache_capacity_bytes: float = 0.0
    warm_keys: list[tuple[int, float]] = field(default_factory=list)  # (unit, bytes) preloaded LRU order, oldest first
    memory: MemoryUse | None = None

    def __len__(self) -> int:
        return len(self.unit)

    def finalize(self) -> "Schedule":
        """Turn the columns into numpy arrays (the fast evaluator reads them without conversion)."""
        for name, dtype in COLUMNS.items():
            setattr(self, name, np.asarray(getattr(self, name), dtype=dtype))
        return self

    def column_lists(self) -> dict[str, list]:
        """The columns as Python lists (fast scalar access for the SimPy processes)."""
        return {name: getattr(self, name).tolist() for name in COLUMNS}


def build_schedule(model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload, budgets: Budgets) -> Schedule:
    """Check the plan against the budgets and lay out every item of the request."""
    mem = check_plan(model, plan, w, budgets)
    t = plan.tiers()
    units = model.units
    st, link = machine.storage, machine.link
    sch = Schedule(names=[u.name for u in units], n_steps=w.new_tokens, memory=mem,
                   read_latency_s=st.request_latency_s, cold_bytes_per_s=st.cold_read_bytes_per_s,
                   cache_bytes_per_s=st.cache_read_bytes_per_s, cache_capacity_bytes=mem.page_cache_bytes)
    ratio = plan.codec.ratio if plan.codec else 1.0
    unpack_speed = plan.codec.unpack_bytes_per_s if plan.codec else 1.0
    router = ExpertRouter(model.n_routed_experts, model.experts_per_token, model.n_blocks, w.expert_skew, w.seed) \
        if model.is_moe else None
    rng = np.random.default_rng(w.seed + 1)
    cache: dict[tuple, float] = {}

    def compute_time(ui: int, cpu: bool, batch: int, new: int, ctx: int) -> float:
        u = units[ui]
        key = (u.kind, u.nbytes, u.flop_params, u.attn_flops_per_ctx_token, cpu, batch, new, ctx)
        if key not in cache:
            cache[key] = (cpu_compute_s if cpu else gpu_compute_s)(u, machine, batch, new, ctx)
        return cache[key]

    for s in range(w.new_tokens):
        new, ctx = (w.prompt_tokens, 0) if s == 0 else (1, w.prompt_tokens + s - 1)
        tokens = w.batch * new
        offload = bool(plan.gpu_offload_min_tokens and tokens >= plan.gpu_offload_min_tokens)
        counts = None
        router_item = {}
        for ui, u in enumerate(units):
            p = t[u.name]
            if u.kind in ("attention", "decoder"):
                router_item[u.block] = len(sch.unit)
            gate = -1
            batch, n_new, c = w.batch, new, ctx
            if u.expert is not None:
                if u.expert == 0:
                    counts = router.draw(u.block, tokens)
                if counts[u.expert] == 0:
                    continue
                batch, n_new, c = int(counts[u.expert]), 1, 0
                if p.tier != "vram" or p.compute == "cpu":
                    hit = plan.expert_predictor_hit_rate is not None and rng.random() < plan.expert_predictor_hit_rate
                    gate = router_item.get(u.block - 1, -1) if hit else router_item[u.block]
            cpu = p.compute == "cpu" and not offload
            load = 0
            if not cpu and (p.tier != "vram"):
                load = GPU_LOAD
            elif cpu and p.tier.startswith("disk"):
                load = CPU_READ
            tier = "ram_pageable" if (offload and p.compute == "cpu" and p.tier != "vram") else p.tier
            read = u.nbytes * (ratio if tier == "disk_compressed" else 1.0) if load and tier.startswith("disk") else 0.0
            unpack = u.nbytes / unpack_speed if load and tier.endswith("compressed") else 0.0
            pinned_path = tier in ("ram_pinned",) or (plan.pinned_staging and tier in ("ram_compressed", "disk_raw", "disk_compressed"))
            copy = (link.latency_s + u.nbytes / (link.pinned_h2d_bytes_per_s if pinned_path else link.pageable_h2d_bytes_per_s)) \
                if load == GPU_LOAD else 0.0
            sch.unit.append(ui)
            sch.step.append(s)
            sch.on_cpu.append(cpu)
            sch.load.append(load)
            sch.read_bytes.append(read)
            sch.unpack_s.append(unpack)
            sch.copy_s.append(copy)
            sch.copy_bytes.append(float(u.nbytes) if load == GPU_LOAD else 0.0)
            sch.compute_s.append(compute_time(ui, cpu, batch, n_new, c))
            sch.pinned_slot.append(load == GPU_LOAD and plan.pinned_staging and tier in ("ram_compressed", "disk_raw", "disk_compressed"))
            sch.gate.append(gate)
    if w.warm:
        sch.warm_keys = _warm_contents(sch)
    return sch.finalize()


def _warm_contents(sch: Schedule) -> list[tuple[int, float]]:
    """What a previous identical run left in the LRU page cache: its most recent reads that fit, oldest first."""
    seen: dict[int, float] = {}
    unit, read = list(sch.unit), list(sch.read_bytes)
    for i in range(len(unit) - 1, -1, -1):
        if read[i] > 0 and unit[i] not in seen:
            seen[unit[i]] = read[i]
    kept, used = [], 0.0
    for ui, nb in seen.items():  # most recent first
        if used + nb > sch.cache_capacity_bytes:
            break
        kept.append((ui, nb))
        used += nb
    return kept[::-1]
