"""Baseline planners, each faithful to its engine (sim.engines.placements), plus traffic-density greedy (Afterimage's default)
and all-resident. Each returns a Plan or raises PlanError when it cannot run at the budgets."""
from __future__ import annotations

from typing import Callable

from hwmodels.specs import MachineSpec
from sim.costs.memory import activation_bytes, kv_cache_bytes
from sim.plan import Budgets, Plan, Request, Workload
from sim.engines.placements import POLICIES, peer_policies
from sim.engines.common import fit_slots, make_plan
from sim.model.shapes import ModelShape
from sim.costs.memory import PlanError


def density_greedy(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                   uses: list[float] | None = None) -> Plan:
    """Afterimage's default: fractional knapsack by traffic density (uses x stored bytes / bytes = uses), VRAM then
    RAM, reserving the largest tensor plus decode scratch; the rest on disk; streamed with one-ahead prefetch."""
    uses = uses or [1.0] * len(model.units)
    order = sorted(range(len(model.units)), key=lambda i: -uses[i])
    largest = max(u.nbytes for u in model.units)
    vram_left = budgets.vram_bytes - kv_cache_bytes(model, w) - activation_bytes(model, w) - 2 * largest
    pin_left = budgets.pinned_bytes - 2 * largest
    ram_left = budgets.ram_bytes - 2 * largest
    tiers = {}
    for i in order:
        u = model.units[i]
        if u.nbytes <= vram_left:
            tiers[u.name], vram_left = "vram", vram_left - u.nbytes
        elif u.nbytes <= min(pin_left, ram_left):
            tiers[u.name], pin_left, ram_left = "ram_pinned", pin_left - u.nbytes, ram_left - u.nbytes
        else:
            tiers[u.name] = "disk_raw"
    plan = make_plan(model, machine, "density", tiers, prefetch_depth=1, vram_slots=2, pinned_slots=2)
    return fit_slots(model, plan, w, budgets, 2)


BASELINES: dict[str, Callable[..., Plan]] = {
    **peer_policies(),  # each installed engine's own placement (sim/engines)
    "density": density_greedy,
    "resident": POLICIES["resident"],
}


def baseline_plans(req: Request) -> dict[str, Plan | str]:
    """Each baseline's plan for the request, or the reason it cannot run (each checks its plan against the budgets:
    check_plan or fit_slots)."""
    out: dict[str, Plan | str] = {}
    for name, fn in BASELINES.items():
        try:
            out[name] = fn(req.model, req.machine, req.workload, req.budgets)
        except PlanError as exc:
            out[name] = str(exc)
    return out
