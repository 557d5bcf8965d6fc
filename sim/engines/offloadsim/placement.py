"""offloadsim's own placements: everything streamed with full overlap, or everything resident."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.costs.memory import check_plan
from sim.engines.common import fit_slots, host_tiers, make_plan
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload


def stream(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """Everything streamed through pinned staging with full copy/compute overlap: weights in pinned RAM while the
    pinned budget lasts, then pageable RAM, then disk; prefetch two units ahead with three VRAM slots when they fit."""
    biggest = max(u.nbytes for u in model.units)
    names = [u.name for u in model.units]
    tiers = host_tiers(model, names, budgets, 3 * biggest, True)
    plan = make_plan(model, machine, "stream", tiers, prefetch_depth=2, overlap_copy=True, vram_slots=3, pinned_slots=3)
    return fit_slots(model, plan, w, budgets, 3)


def resident(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """Everything in VRAM (refused with the shortfall when it does not fit)."""
    plan = make_plan(model, machine, "resident", {u.name: "vram" for u in model.units}, prefetch_depth=0, vram_slots=1,
                     pinned_slots=0)
    check_plan(model, plan, w, budgets)
    return plan
