"""How an engine's planner ranks its candidate plans: on the prefill and a few decode steps, by the objective."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload
from sim.run.simulate import fast_simulate

RANK_TOKENS = 4  # candidates are ranked on the prefill and 3 decode steps; the chosen plan is timed on the workload


def ranking(w: Workload) -> Workload:
    return w.model_copy(update={"new_tokens": min(w.new_tokens, RANK_TOKENS)})


def score(s: dict, w: Workload, objective: str) -> float:
    """The objective from a ranking run: time per token, or the request's total (first token + the decode steps)."""
    return s["time_per_token_s"] if objective == "token" else s["ttft_s"] + (w.new_tokens - 1) * s["time_per_token_s"]


def ranked_score(model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload, budgets: Budgets,
                 objective: str) -> float:
    return score(fast_simulate(model, machine, plan, ranking(w), budgets), w, objective)


def best_of(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets, plans: list[Plan],
            objective: str) -> Plan | None:
    """The best of `plans` by the objective on the ranking workload (the first of equals)."""
    best, best_t = None, float("inf")
    for p in plans:
        t = ranked_score(model, machine, p, w, budgets, objective)
        if best is None or t < best_t * (1 - 1e-12):
            best, best_t = p, t
    return best
