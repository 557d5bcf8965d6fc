"""Plans for the engine the user will run (`plan --engine`): only what that engine can execute, timed with that
engine's model (its pipeline and its measured host costs, machine.peers), and every engine side by side.

- offloadsim: the full planner (planner/core.py).
- accelerate: any device_map of whole units over the GPU, CPU RAM and disk. Accelerate copies an offloaded module
  in before each forward (blocking, pageable, no prefetch), so a unit's cost off the GPU does not depend on the
  others: the best map keeps the units that cost most per byte off the GPU, a knapsack solved greedily by that
  density (exact up to the last unit that does not fit), and it is never worse than Accelerate's own map.
- llamacpp: every `-ngl` value (the last N blocks on the GPU, the rest computed on the CPU), the fastest that fits.
- airllm: nothing to choose (every layer re-read every token); its time, or why it cannot run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hwmodels.specs import MachineSpec
from hwmodels.units import unknown_name
from sim.equations import copy_time_s, read_time_s
from sim.memory import PlanError
from sim.plan import Budgets, Plan, Workload
from sim.policies import POLICIES, llamacpp_ngl
from sim.policies import accelerate_map as run_map
from sim.shapes import ModelShape, param_modules

ENGINES = ("offloadsim", "accelerate", "llamacpp", "airllm")


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
    from sim.simulate import fast_simulate
    return fast_simulate(model, machine, plan, w, budgets)


def _best(model, machine, w, budgets, plans: list[Plan]) -> tuple[Plan | None, dict]:
    best, best_s = None, {}
    for p in plans:
        s = _simulate(model, machine, p, w, budgets)
        if best is None or s["time_per_token_s"] < best_s["time_per_token_s"] * (1 - 1e-12):
            best, best_s = p, s
    return best, best_s


def best_accelerate_map(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """The fastest device_map Accelerate can run at these budgets (greedy by seconds saved per byte)."""
    peer = machine.peers["accelerate"]

    def off_s(u, disk: bool) -> float:  # seconds per token a unit costs off the GPU
        t = copy_time_s(u.nbytes, machine, pinned=False) + peer.load_module_s * param_modules(u.kind, model.family)
        return t + (read_time_s(u.nbytes, machine, warm=True) if disk else 0.0)
    order = sorted(model.units, key=lambda u: (-off_s(u, False) / max(u.nbytes, 1), u.name))

    def tiers_keeping(keep: int) -> dict[str, str]:  # the densest `keep` units on the GPU, then RAM, then disk
        tiers, ram_left = {}, budgets.ram_bytes
        for k, u in enumerate(order):
            if k < keep:
                tiers[u.name] = "vram"
            elif u.nbytes <= ram_left:
                tiers[u.name], ram_left = "ram_pageable", ram_left - u.nbytes
            else:
                tiers[u.name] = "disk_raw"
        return tiers
    cands = []
    for keep in range(len(order), 0, -1):  # fewer units on the GPU only adds copies: the first that fits is the
        try:                               # best of this order; none on the GPU (all on the CPU) is its own case
            cands.append(run_map(model, machine, w, budgets, tiers_keeping(keep), "accelerate-planned"))
        except PlanError:
            continue
        break
    try:
        cands.append(run_map(model, machine, w, budgets, tiers_keeping(0), "accelerate-planned"))
    except PlanError:
        pass
    try:
        cands.append(POLICIES["accelerate"](model, machine, w, budgets))
    except PlanError:
        pass
    if not cands:
        raise PlanError("Accelerate cannot run this model at these budgets (an offloaded module must fit on the GPU "
                        "beside the resident ones); raise --vram")
    return _best(model, machine, w, budgets, cands)[0]


def _llamacpp(model, machine, w, budgets) -> Plan:
    plans = []
    for ngl in range(model.n_blocks + 2):
        try:
            plans.append(llamacpp_ngl(model, machine, w, budgets, ngl))
        except PlanError:
            pass
    if not plans:
        raise PlanError("llama.cpp cannot run this model at these budgets; raise --ram or --vram")
    best = _best(model, machine, w, budgets, plans)[0]
    return best.model_copy(update={"policy": "llamacpp-planned"})


def plan_for_engine(engine: str, model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                    **planner_kw) -> EnginePlan:
    """The best plan `engine` can execute and its predicted times; `plan` None with the reason when none fits."""
    if engine not in ENGINES:
        raise unknown_name("engine", engine, list(ENGINES))
    if engine == "offloadsim":
        from planner.core import plan_with_report
        rep = plan_with_report(model, machine, w, budgets, confirm=False, **planner_kw)
        if not rep.plan.feasible:
            return EnginePlan(engine, None, reason=rep.plan.reason)
        return EnginePlan(engine, rep.plan, _simulate(model, machine, rep.plan, w, budgets))
    try:
        plan = {"accelerate": best_accelerate_map, "llamacpp": _llamacpp, "airllm": POLICIES["airllm"]}[engine](
            model, machine, w, budgets)
    except PlanError as exc:
        return EnginePlan(engine, None, reason=str(exc))
    notes = [] if machine.peers[engine].source.startswith(("measured", "[M]")) else \
        [f"{engine}'s own host costs are not measured for {machine.name} ({machine.peers[engine].source}); the time is "
         "its pipeline only"]
    return EnginePlan(engine, plan, _simulate(model, machine, plan, w, budgets), notes=notes)


def compare_engines(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                    **planner_kw) -> dict[str, EnginePlan]:
    """Every engine's best plan at these budgets."""
    return {e: plan_for_engine(e, model, machine, w, budgets, **planner_kw) for e in ENGINES}
