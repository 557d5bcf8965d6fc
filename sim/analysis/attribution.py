"""Per-unit stall attribution: how much the time per token would drop if that unit were resident in VRAM.

Counterfactual runs of the fast evaluator under the plan's own RAM and pinned budgets (so the page cache is as large
as in the real run); only the VRAM budget is lifted, so the answer isolates the unit's own load.
"""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.costs.tiers import tier_row
from sim.run.fast import evaluate
from sim.analysis.metrics import step_times
from sim.plan import Budgets, Placement, Plan, Workload
from sim.run.schedule import build_schedule
from sim.model.shapes import ModelShape


def counterfactual_budgets(budgets: Budgets) -> Budgets:
    """The run's RAM and pinned budgets with VRAM lifted (a unit made resident must not be refused for space)."""
    return budgets.model_copy(update={"vram_bytes": Budgets.unlimited().vram_bytes})


def _tpot(model, machine, plan, w, budgets: Budgets) -> float:
    sch = build_schedule(model, machine, plan, w, budgets)
    r = evaluate(sch, plan.prefetch_depth, plan.overlap_copy, plan.vram_slots, plan.pinned_slots)
    return step_times(sch, r.c_end)[1]


def stall_attribution(model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload, budgets: Budgets,
                      units: list[str] | None = None, limit: int = 64) -> list[dict]:
    """[{unit, tier, gain_s}] sorted by gain; `units` defaults to the first `limit` non-resident units.

    `budgets` are the run's: the page cache of every counterfactual is what its RAM budget leaves over.
    """
    b = counterfactual_budgets(budgets)
    base = _tpot(model, machine, plan, w, b)
    candidates = units or [p.unit for p in plan.placements if not tier_row(p.tier).resident][:limit]
    index = {p.unit: k for k, p in enumerate(plan.placements)}
    out = []
    for name in candidates:
        placements = list(plan.placements)
        placements[index[name]] = Placement(unit=name, tier="vram", compute="gpu")
        alt = plan.model_copy(update={"placements": tuple(placements), "reader_threads": 1})
        out.append({"unit": name, "tier": plan.placements[index[name]].tier,
                    "gain_s": base - _tpot(model, machine, alt, w, b)})
    return sorted(out, key=lambda r: -r["gain_s"])
