"""A fast planner for sweeps (what-if grids): the baselines plus a few hybrid splits, scored by the fast evaluator.

No integer program and no local search: about a millisecond per candidate. `planner.plan` is the thorough one.
"""
from __future__ import annotations

from planner.baselines import density_greedy
from sim.run.fast import Unsupported
from sim.costs.memory import PlanError, activation_bytes, kv_cache_bytes
from sim.plan import Plan, Request
from sim.engines.common import OFFLOAD_MIN_TOKENS
from sim.engines.placements import POLICIES, peer_policies
from sim.engines.common import fit_slots, make_plan
from sim.run.simulate import fast_simulate


def hybrids(req: Request) -> list[Plan]:
    """Resident layers while VRAM lasts (after 3 staging slots), the rest split between CPU compute and streaming
    from pinned RAM in proportions around the balance of CPU time and copy time; disk when RAM runs out."""
    model, machine, w, budgets = req.model, req.machine, req.workload, req.budgets
    units = model.units
    body = [u.nbytes for u in units if u.kind not in ("embedding", "lm_head")]
    slot = max(body) if body else max(u.nbytes for u in units)
    vram_left = budgets.vram_bytes - kv_cache_bytes(model, w) - activation_bytes(model, w) - 3 * slot
    order = sorted(range(len(units)), key=lambda i: (units[i].kind == "embedding", -units[i].nbytes))
    resident = set()
    for i in order:
        if units[i].kind != "embedding" and units[i].nbytes <= vram_left:
            resident.add(i)
            vram_left -= units[i].nbytes
    rest = [i for i in range(len(units)) if i not in resident]
    copy_s = machine.link.pinned_h2d_bytes_per_s
    cpu_s = machine.cpu.memory_bytes_per_s
    share = copy_s / (copy_s + cpu_s)  # fraction computed on the CPU that balances the two
    plans = []
    for f in sorted({0.0, share, 1.0}):
        tiers, compute = {}, {}
        ram_left, pin_left = budgets.ram_bytes - 3 * slot, budgets.pinned_bytes - 3 * slot
        k = 0
        for i in rest:
            u = units[i]
            on_cpu = u.kind == "embedding" or u.nbytes > slot or (k * f) % 1 + f >= 1 - 1e-9
            k += 1
            if u.nbytes <= min(pin_left, ram_left) and not on_cpu:
                tiers[u.name], pin_left, ram_left = "ram_pinned", pin_left - u.nbytes, ram_left - u.nbytes
            elif u.nbytes <= ram_left:
                tiers[u.name], ram_left = "ram_pageable", ram_left - u.nbytes
                if on_cpu:
                    compute[u.name] = "cpu"
            else:
                tiers[u.name] = "disk_raw"
                if on_cpu:
                    compute[u.name] = "cpu"
        for i in resident:
            tiers[units[i].name] = "vram"
        plan = make_plan(model, machine, "planner-quick", tiers, compute, prefetch_depth=2, vram_slots=3,
                         pinned_slots=3, gpu_offload_min_tokens=OFFLOAD_MIN_TOKENS)
        try:
            plans.append(fit_slots(model, plan, w, budgets, 3))
        except PlanError:
            pass
    return plans


def quick_plan(req: Request) -> tuple[Plan | None, dict]:
    """The best of the baselines and the hybrids by the fast evaluator: (plan, its summary) or (None, {})."""
    model, machine, w, budgets = req.model, req.machine, req.workload, req.budgets
    cands: list[Plan] = []
    for name in (*peer_policies(dominated=False), "stream", "resident"):
        try:
            cands.append(POLICIES[name](model, machine, w, budgets))
        except PlanError:
            pass
    try:
        cands.append(density_greedy(model, machine, w, budgets))
    except PlanError:
        pass
    cands += hybrids(req)
    best, best_s = None, {}
    for p in cands:
        try:
            s = fast_simulate(model, machine, p, w, budgets)  # checks the plan against the budgets first
        except (PlanError, Unsupported):
            continue
        if not best_s or s["time_per_token_s"] < best_s["time_per_token_s"]:
            best, best_s = p, s
    return best, best_s
