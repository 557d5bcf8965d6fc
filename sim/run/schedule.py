"""The execution sequence shared by the SimPy timeline and the fast evaluator.

Each item is one unit computed at one step (token). Loads (read -> unpack -> copy) and compute durations are
precomputed here; only page-cache hits depend on the order of reads, which both engines replay identically. What
the plan's engine adds (its host costs, kernels, start-up, post-pass) comes from its Pricing (sim.engines.base).
"""
from __future__ import annotations

import functools
from collections import OrderedDict

import numpy as np

from hwmodels.specs import MachineSpec
from sim.costs.compute import CpuKernels, GpuKernels, compute_sources, cpu_compute_s, gpu_compute_s
from sim.costs.memory import check_plan
from sim.costs.tiers import load_row, tier_row
from sim.engines import costs_of, engine_of
from sim.engines.base import Pricing
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload
from sim.run.items import CPU_READ, GPU_LOAD, Schedule
from sim.run.reads import warm_contents
from sim.run.steps import dense_steps, moe_steps, step_shape


def build_schedule(model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload, budgets: Budgets) -> Schedule:
    """Check the plan against the budgets and lay out every item of the request."""
    mem = check_plan(model, plan, w, budgets)
    pricing = engine_of(plan.engine).pricing(model, machine, plan, w, costs_of(machine, plan.engine))
    st = machine.storage
    sch = Schedule(names=[u.name for u in model.units], n_steps=w.new_tokens, memory=mem,
                   startup_s=pricing.startup_s(), contention=machine.cpu.copy_contention,
                   read_latency_s=st.request_latency_s, cold_bytes_per_s=st.cold_read_bytes_per_s,
                   cache_bytes_per_s=pricing.cache_read_bytes_per_s(), cache_capacity_bytes=mem.page_cache_bytes)
    sch.compute_sources = compute_sources(model.units, machine, model.family)
    compute_time = _compute_timer(model, machine, plan, pricing)
    row = _row_maker(model, plan, machine, pricing, w)
    rows = {False: [row(i, False) for i in range(len(model.units))]}
    shape_of = functools.partial(step_shape, w, pricing.static_cache)
    if not model.is_moe:  # dense: every step runs every unit in order, so a step's columns are the unit rows
        dense_steps(sch, rows, row, compute_time, len(model.units), w, plan, shape_of)
    else:
        moe_steps(sch, rows, row, compute_time, model, plan, w, shape_of)
    sch.link_at_s = np.full(len(sch.unit), -1.0)
    sch.fault_s = np.zeros(len(sch.unit))
    sch.gpu = np.zeros(len(sch.unit), dtype=np.int64)
    sch.finalize()
    if w.warm:
        sch.warm_keys = warm_contents(sch)
    pricing.post_pass(sch)
    return sch


def _compute_timer(model: ModelShape, machine: MachineSpec, plan: Plan, pricing: Pricing):
    """compute_time(unit index, on the CPU, batch, new tokens, context, step, first expert of its block) -> seconds:
    the engine's kernels on the machine's grids (cached per model and machine), then the engine's own additions."""
    units, t, k = model.units, plan.tiers(), pricing.kernels()
    cache = _compute_cache(model, machine)
    memory = [tier_row(t[u.name].tier).cpu_memory for u in units]  # where a CPU unit reads

    gpu_k = GpuKernels(k.dispatch, k.scale[False], k.op_s[False], k.row_s, k.multi)
    cpu_k = {kind: CpuKernels(k.scale[True], k.stream[kind], k.op_s[True], k.cpu_flops, k.cpu_fused, k.cpu_row_s)
             for kind in ("decoder", "lm_head")}

    def base_s(ui: int, cpu: bool, batch: int, new: int, ctx: int) -> float:
        # the unit index names its shape, kind and family within one model
        if k.last_only and units[ui].kind == "lm_head":  # logits of the last position of each sequence only
            new, ctx = 1, ctx + new - 1
        kernels = cpu_k["lm_head" if units[ui].kind == "lm_head" else "decoder"] if cpu else gpu_k
        key = (ui, cpu, batch, new, ctx, memory[ui] if cpu else "", kernels)
        if key not in cache:
            cache[key] = cpu_compute_s(units[ui], machine, batch, new, ctx, model.family, memory[ui], kernels) \
                if cpu else gpu_compute_s(units[ui], machine, batch, new, ctx, model.family, kernels)
        return cache[key]

    def compute_time(ui: int, cpu: bool, batch: int, new: int, ctx: int, s: int = 0,
                     first_expert: bool = False) -> float:
        return pricing.compute_s(ui, cpu, base_s(ui, cpu, batch, new, ctx), (batch, new, ctx), s, first_expert)
    return compute_time


def _row_maker(model: ModelShape, plan: Plan, machine: MachineSpec, pricing: Pricing, w: Workload):
    """row(unit index, offload) -> the unit's step-invariant columns (_unit_row)."""
    units, t = model.units, plan.tiers()

    def row(ui: int, offload: bool) -> tuple:
        # rows of a CPU-held embedding are looked up in place, never the table copied (neither llama.cpp's GET_ROWS
        # nor offloadsim's engine copies it: sim.costs.memory.streamed_units gives it no slot); an engine that
        # offloads per operation sees one token per sequence at its head (the last position's logits)
        kind = units[ui].kind
        small_head = kind == "lm_head" and w.batch < (plan.gpu_offload_min_tokens or 0)
        offload = offload and not (kind == "embedding" or pricing.per_op_offload and small_head)
        return _unit_row(model, ui, t[units[ui].name], plan, machine, pricing, offload)
    return row


def _unit_row(model: ModelShape, ui: int, p, plan: Plan, machine: MachineSpec, pricing: Pricing,
              offload: bool) -> tuple:
    """Step-invariant columns of a unit: (cpu, load, read, unpack, copy, copy_bytes, pinned_slot, blocking, overhead).
    A CPU-placed unit computed on the GPU for a large step (offload) is copied from where it lives. A copy from
    pageable memory does not overlap GPU compute (measured on the H200: the compute of the unit before it finished
    only after the copy; lab/journal/validation.md), so it waits for the previous compute like a blocking copy."""
    u = model.units[ui]
    cpu = p.compute == "cpu" and not offload
    pins = pricing.pins(u)
    r = load_row(tier_row(p.tier), u.nbytes, cpu, plan.codec, machine, plan.pinned_staging and pins)
    load = GPU_LOAD if r.gpu_load else CPU_READ if r.cpu_read else 0
    # a CPU lookup in a mapped embedding touches the rows it reads, not the table (Accelerate's disk offload is a view)
    rows_only = u.kind == "embedding" and load == CPU_READ and pricing.maps_rows()
    read = 0.0 if rows_only else r.read_nbytes
    unpack, copy, pinned, staged, gpu_load = r.unpack_s, r.copy_s, r.pinned, r.staged, r.gpu_load
    blocking = gpu_load and (not plan.overlap_copy or not pinned)
    host, overhead = pricing.load_costs(ui, p.tier, load, copy, pins)
    unpack += host
    return cpu, load, read, unpack, copy, float(u.nbytes) if gpu_load else 0.0, gpu_load and staged, blocking, overhead


_CACHES: "OrderedDict[tuple, tuple]" = OrderedDict()


def _compute_cache(model: ModelShape, machine: MachineSpec) -> dict:
    """Compute times depend on the model and the machine's GPU, CPU and grids only, so schedules for the same model
    on variants of a machine (other storage, link or budgets: whatif, the planner) share them. Keyed by the objects'
    identities; each entry holds those objects, so an identity cannot be reused while its entry lives."""
    key = (id(model), id(machine.gpu), id(machine.cpu), id(machine.compute_grids))
    hit = _CACHES.get(key)
    if hit is not None:
        _CACHES.move_to_end(key)
        return hit[-1]
    _CACHES[key] = (model, machine.gpu, machine.cpu, machine.compute_grids, {})
    if len(_CACHES) > 32:
        _CACHES.popitem(last=False)
    return _CACHES[key][-1]
