"""Per-unit stall attribution: how much the time per token would drop if that unit were resident in VRAM.

Counterfactual runs of the fast evaluator with budgets lifted, so the answer isolates the unit's own load.
"""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.fast import evaluate
from sim.metrics import step_times
from sim.plan import Budgets, Placement, Plan, Workload
from sim.schedule import build_schedule
from sim.shapes import ModelShape



def _tpot(model, machine, plan, w) -> float:
    sch = build_schedule(model, machine, plan, w, Budgets.unlimited())
    r = evaluate(sch, plan.prefetch_depth, plan.overlap_copy, plan.vram_slots, plan.pinned_slots)
    return step_times(sch, r.c_end)[1]


def stall_attribution(model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload,
                      units: list[str] | None = None, limit: int = 64) -> list[dict]:
    """[{unit, tier, gain_s}] sorted by gain; `units` defaults to the first `limit` non-resident units."""
    base = _tpot(model, machine, plan, w)
    candidates = units or [p.unit for p in plan.placements if p.tier != "vram"][:limit]
    index = {p.unit: k for k, p in enumerate(plan.placements)}
    out = []
    for name in candidates:
        placements = list(plan.placements)
        placements[index[name]] = Placement(unit=name, tier="vram", compute="gpu")
        alt = plan.model_copy(update={"placements": tuple(placements), "reader_threads": 1})
        out.append({"unit": name, "tier": plan.placements[index[name]].tier, "gain_s": base - _tpot(model, machine, alt, w)})
    return sorted(out, key=lambda r: -r["gain_s"])
