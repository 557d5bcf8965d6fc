"""What every engine's placement is made of: a plan from tiers, RAM tiers in order, blocks, staging slots."""
from __future__ import annotations

from typing import Callable

from hwmodels.specs import MachineSpec
from sim.costs.memory import PlanError, check_plan
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Placement, Plan, Workload

Policy = Callable[[ModelShape, MachineSpec, Workload, Budgets], Plan]

# a step of this many tokens or more multiplies CPU-held weights on the GPU (llama.cpp's op offload; the planner's
# plans offload at the same size)
OFFLOAD_MIN_TOKENS = 32


def make_plan(model: ModelShape, machine: MachineSpec, policy: str, tiers: dict[str, str],
              compute: dict[str, str] | None = None, **kw) -> Plan:
    compute = compute or {}
    placements = tuple(Placement(unit=u.name, tier=tiers[u.name], compute=compute.get(u.name, "gpu")) for u in model.units)
    return Plan(model=model.name, machine=machine.name, policy=policy, placements=placements, **kw)


def fit_slots(model, plan: Plan, w, budgets, most: int) -> Plan:
    """The plan with the most VRAM staging slots (up to `most`) that fits; the 1-slot plan's error otherwise."""
    for slots in range(most, 0, -1):
        cand = plan.model_copy(update={"vram_slots": slots, "prefetch_depth": min(plan.prefetch_depth, slots)})
        try:
            check_plan(model, cand, w, budgets)
            return cand
        except PlanError as exc:
            err = exc
    raise err


def largest_feasible(hi: int, feasible: Callable[[int], bool]) -> int:
    """The largest k in 0..hi with feasible(k), by bisection, for a feasible(0) whose true values form a prefix."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if feasible(mid) else (lo, mid - 1)
    return lo


def host_tiers(model: ModelShape, names: list[str], budgets: Budgets, reserve_pinned: int, pinned_ok: bool) -> dict[str, str]:
    """RAM tiers in model order while they fit (pinned first if allowed), then the disk."""
    tiers = {}
    ram_left = budgets.ram_bytes - reserve_pinned
    pin_left = budgets.pinned_bytes - reserve_pinned
    for n in names:
        nb = model.unit(n).nbytes
        if pinned_ok and nb <= pin_left and nb <= ram_left:
            tiers[n], pin_left, ram_left = "ram_pinned", pin_left - nb, ram_left - nb
        elif nb <= ram_left:
            tiers[n], ram_left = "ram_pageable", ram_left - nb
        else:
            tiers[n] = "disk_raw"
    return tiers


def blocks_of(model: ModelShape) -> list[list[str]]:
    """Units grouped as engines place them: a whole decoder block (attention with its experts) at a time."""
    groups: list[list[str]] = []
    for u in model.units:
        if groups and model.unit(groups[-1][0]).block == u.block:
            groups[-1].append(u.name)
        else:
            groups.append([u.name])
    return groups
