"""Plans for the engine the user will run (`plan --engine`): only what that engine can execute, timed with that
engine's model (its pipeline and its measured host costs, machine.peers), and every engine side by side.

The engine whose plans the planner makes (planner/core.py: Engine.plans_itself, offloadsim's own) gets the full
planner; every other engine its own best plan (Engine.best_plan, in its package under sim/engines: Accelerate's
best device_map, llama.cpp's best -ngl, AirLLM's one placement).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hwmodels.specs import MachineSpec
from sim.costs.memory import PlanError
from sim.engines import costs_of, engine_of, engines, own_engine
from sim.engines.reference import REFERENCE_MACHINE
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload
from sim.run.simulate import fast_simulate
from planner.core import plan_with_report


def engine_list() -> tuple[str, ...]:
    """The installed engines, offloadsim's own first."""
    return tuple(engines())


ENGINES = engine_list()


@dataclass
class EnginePlan:
    engine: str
    plan: Plan | None
    summary: dict = field(default_factory=dict)
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def time_per_token_s(self) -> float | None:
        return self.summary.get("time_per_token_s")


def _simulate(model, machine, plan, w, budgets) -> dict:
    return fast_simulate(model, machine, plan, w, budgets)


def _core() -> str:
    return own_engine()


def plan_for_engine(engine: str, model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                    seeds: dict[str, Plan] | None = None, **planner_kw) -> EnginePlan:
    """The best plan `engine` can execute and its predicted times; `plan` None with the reason when none fits.
    The planner's own engine: the planner, never worse than `seeds` (e.g. the peers' placements run on it)."""
    e = engine_of(engine)
    if e.plans_itself:
        rep = plan_with_report(model, machine, w, budgets, confirm=False, seeds=seeds, **planner_kw)
        if not rep.plan.feasible:
            return EnginePlan(engine, None, reason=rep.plan.reason)
        return EnginePlan(engine, rep.plan, _simulate(model, machine, rep.plan, w, budgets))
    try:
        plan = e.best_plan(model, machine, w, budgets, planner_kw.get("objective", "token"))
    except PlanError as exc:
        return EnginePlan(engine, None, reason=str(exc))
    notes = unmeasured_notes(engine, machine) + e.plan_notes(model, machine, plan, costs_of(machine, engine))
    return EnginePlan(engine, plan, _simulate(model, machine, plan, w, budgets), notes=notes)


def unmeasured_notes(engine: str, machine: MachineSpec) -> list[str]:
    """A line saying that an engine's host costs are not measured on this machine (none where they are, or where the
    engine has none of its own): measured means a value of `peers.ENGINE` with a measured source ('[M]')."""
    e = engine_of(engine)
    if e.costs_model is None:
        return []
    mine = [v for k, v in machine.sources.items() if k.startswith(f"peers.{engine}.")]
    legacy = machine.peers.get(engine, {}).get("source")  # a profile written with one source for all its values
    if any(str(v).startswith(("measured", "[M]")) for v in mine + [legacy or ""]):
        return []
    if not machine.peers.get(engine):
        return [f"{engine}'s host costs are not measured for {machine.name}: derived from its parts and those "
                f"fitted on {REFERENCE_MACHINE} (sim/engines/{engine}/derived.py)" + e.measure_hint()]
    return [f"{engine}'s host costs are not measured for {machine.name}: the time is its pipeline alone "
            f"({legacy or e.unmeasured_source})"
            + e.measure_hint()]


def peer_seeds(peers: dict[str, EnginePlan]) -> dict[str, Plan]:
    """The peers' planned placements as plans of the planner's engine: the planner must not be worse than any."""
    core = _core()
    return {f"{e}-planned": r.plan.model_copy(update={"engine": core, "policy": "planner"})
            for e, r in peers.items() if r.plan is not None}


def peer_engine_plans(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets, objective: str = "token",
                      known: dict[str, EnginePlan] | None = None) -> dict[str, EnginePlan]:
    """Every peer engine's best plan for the objective, reusing those in `known`."""
    known = known or {}
    return {e: known.get(e) or plan_for_engine(e, model, machine, w, budgets, objective=objective)
            for e, eng in engines().items() if not eng.plans_itself}


def compare_engines(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                    known: dict[str, EnginePlan] | None = None, **planner_kw) -> dict[str, EnginePlan]:
    """Every engine's best plan at these budgets, reusing those in `known`; the planner's own is planned never worse
    than a peer's placement."""
    known = known or {}
    core = _core()
    peers = peer_engine_plans(model, machine, w, budgets, planner_kw.get("objective", "token"), known)
    ours = known.get(core) or plan_for_engine(core, model, machine, w, budgets, seeds=peer_seeds(peers), **planner_kw)
    return {core: ours, **peers}
