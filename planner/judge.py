"""The planner's last step: the best of the search and every seed, peer and given plan on the real workload,
confirmed by the simulator, with the lower bound; and the report it returns."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from hwmodels.units import GiB
from planner.bound import lower_bound
from planner.choices import OPTIONS
from planner.evaluator import COMPRESSED, Evaluator, assignment_of, is_planner_runtime, objective_value, settings_of
from planner.search import Outcome
from sim.costs.load import load_time_s
from sim.costs.memory import PlanError, activation_bytes, kv_cache_bytes, min_vram_bytes
from sim.costs.tiers import TIER_ROWS
from sim.costs.transfer import Codec
from sim.engines import own_engine
from sim.plan import Placement, Plan, Request
from sim.run.fast import Unsupported
from sim.run.simulate import fast_simulate, simulate

SIMPY_MAX_UNITS = 2000  # larger models: confirmed by fast_simulate, not SimPy, and a peer's placement with its own
                        # runtime is a seed only where the evaluator models it (a schedule costs 0.3 s for DeepSeek-R1)
BETTER = 1 - 1e-12      # a candidate replaces the best only when this much faster


@dataclass(frozen=True)
class PlanOptions:
    """How to plan (plan_with_report's keywords). `codec`: of the compressed tiers (None: the machine's);
    `tiers`: the tiers allowed (None: all); `allow_cpu`: units may be computed on the CPU; `time_budget_s`: the
    search's safety net; `confirm`: simulate the chosen plan; `objective`: 'request' (the load and the request), 'total' (the request)
    or 'token' (time per token), planner.evaluator.objective_value;
    `max_evals`: plans the search may score; `progress`: a count on stderr; `seeds`: plans the result must not be
    worse than (searched from, and judged); `floors`: plans judged beside the result only (a sweep's smaller
    budget or slower part: the result is never slower than any, and equals the plan without them unless one is
    strictly faster)."""
    codec: Codec | None = None
    tiers: tuple[str, ...] | None = None
    allow_cpu: bool = True
    time_budget_s: float | None = None
    confirm: bool = True
    objective: str = "token"
    max_evals: int | None = None
    progress: bool = False
    seeds: Mapping[str, Plan] = field(default_factory=dict)
    floors: Mapping[str, Plan] = field(default_factory=dict)

    def allowed(self) -> list[tuple[str, str]]:
        """The (tier, device) options the search may use: the allowed tiers and devices, a compressed tier only with
        a codec, never pinned RAM for the CPU (its cost is pageable RAM's)."""
        return [o for o in OPTIONS if (self.tiers is None or o[0] in self.tiers) and (self.allow_cpu or o[1] == "gpu")
                and (self.codec is not None or not TIER_ROWS[o[0]].compressed)
                and not (o[1] == "cpu" and TIER_ROWS[o[0]].pinned_home)]

    @property
    def any_placement(self) -> bool:
        """Every tier and device allowed: peers' and given placements may be chosen as they are."""
        return self.tiers is None and self.allow_cpu


@dataclass(frozen=True)
class PlanReport:
    plan: Plan
    summary: dict = field(default_factory=dict)          # SimPy confirmation of the chosen plan
    lower_bound_s: float = float("nan")                  # bound on the request's total time (planner/bound.py)
    baselines: dict = field(default_factory=dict)        # name -> {"time_per_token_s", "total_s"} or {"error"}
    candidates: int = 0
    seconds: float = 0.0
    converged: bool = True                               # the search ended at a local optimum (or exhaustively)
    stopped: str = "converged"                           # why the search stopped: converged, exhaustive, a limit
    evaluations: int = 0                                 # plans scored by the search
    seeds: dict = field(default_factory=dict)            # seed name -> objective on the real workload
    chosen_from: str = "search"                          # the search, or the seed that beat it

    @property
    def gap(self) -> float:
        """Relative gap of the simulated total time to the lower bound."""
        return self.summary["total_s"] / self.lower_bound_s - 1 if self.summary and self.lower_bound_s > 0 else float("nan")


@dataclass
class Found:
    """What the search leaves the judge: its outcome, the seeds it scored (name, assignment, settings, score), the
    peers' plans (or why they cannot run), the plans it scored, and the evaluator of the real workload."""
    out: Outcome | None
    scored: list
    peers: dict
    evaluations: int
    ev_real: Evaluator


class Best:
    """The best candidate so far by the objective: (name, an (assignment, settings) pair or a Plan)."""

    def __init__(self, objective: str):
        self.objective, self.pick, self.t, self.seeds = objective, None, float("inf"), {}

    def offer(self, name: str, candidate, summary: dict) -> None:
        t = objective_of(summary, self.objective)
        self.seeds[name] = t
        if t < self.t * BETTER:  # the plan (15,000 placements for DeepSeek-R1) is built once, at the end
            self.pick, self.t = (name, candidate), t


def objective_of(s: dict, objective: str) -> float:
    """The objective of a summary with its load (`load_s`)."""
    return objective_value(objective, s["time_per_token_s"], s["total_s"], s["load_s"])


def infeasible(req: Request) -> Plan:
    """The plan saying why no plan fits the request's budgets, naming the fix."""
    model, w, budgets = req.model, req.workload, req.budgets
    biggest = max(u.nbytes for u in model.units)
    need = min_vram_bytes(model, w)
    reason = (f"needs at least {need / GiB:.2f} GiB of VRAM (budget {budgets.vram_bytes / GiB:.2f} GiB): staging slot "
              f"for the largest unit {biggest / GiB:.2f} GiB + KV cache {kv_cache_bytes(model, w) / GiB:.2f} GiB + "
              f"activations {activation_bytes(model, w) / GiB:.2f} GiB; raise --vram or shorten the prompt/batch")
    if need <= budgets.vram_bytes:
        reason = (f"no placement fits RAM {budgets.ram_bytes / GiB:.2f} GiB and pinned {budgets.pinned_bytes / GiB:.2f} GiB "
                  "with a staging buffer for the largest unit; raise --ram or --pinned")
    placements = tuple(Placement(unit=u.name, tier="disk_raw") for u in model.units)
    return Plan(model=model.name, machine=req.machine.name, policy="planner", placements=placements, feasible=False,
                reason=reason)


def judge(req: Request, opts: PlanOptions, found: Found, t0: float) -> PlanReport:
    """The best of the search and every seed and peer on the real workload, confirmed, with the bound.
    `found.evaluations`: the plans the search scored (the judge scores with the search's evaluator on dense models)."""
    ev_real, out = found.ev_real, found.out
    best = Best(opts.objective)
    finalists = ([("search", out.assign, out.settings)] if out else []) + [(n, a, s) for n, a, s, _ in found.scored]
    for name, a, s in finalists:
        summ = ev_real.summary(a, s)
        if summ is not None:
            best.offer(name, (a, s), summ)
    base_times = _peers(req, opts, found, best)
    _given(req, opts, ev_real, best)
    bound = lower_bound(ev_real, opts.allowed())
    stopped = out.stopped if out else "no feasible seed"
    converged = out.converged if out else True
    if best.pick is None:
        return PlanReport(infeasible(req), baselines=base_times, lower_bound_s=bound, candidates=len(found.scored),
                          seconds=time.perf_counter() - t0, stopped=stopped, evaluations=found.evaluations,
                          converged=converged)
    chosen_from, plan = best.pick
    if not isinstance(plan, Plan):
        plan = ev_real.plan(*plan)
    summary = {}
    if opts.confirm:
        summary = simulate(req.model, req.machine, plan, req.workload, req.budgets).summary \
            if len(req.model.units) < SIMPY_MAX_UNITS else fast_simulate(req.model, req.machine, plan, req.workload,
                                                                          req.budgets)
        summary["load_s"] = load_time_s(req.model, req.machine, plan, req.workload.warm)["total_s"]
        summary["request_s"] = summary["load_s"] + summary["total_s"]
    return PlanReport(plan, summary, bound, base_times, len(found.scored), time.perf_counter() - t0,
                      converged=converged, stopped=stopped, evaluations=found.evaluations,
                      seeds=best.seeds, chosen_from=chosen_from)


def _peers(req: Request, opts: PlanOptions, found: Found, best: Best) -> dict:
    """Each peer's times as its engine runs it (the report's baselines), and its placement run by offloadsim's engine
    offered to `best`: where offloadsim's staging slot for a prompt's copies of CPU-held units does not fit
    (llama.cpp copies a tensor at a time), with those units computed on the CPU instead."""
    base_times = {}
    for name, p in found.peers.items():
        if isinstance(p, str):
            base_times[name] = {"error": p}
            continue
        s = simulated(req, p, found.ev_real)
        base_times[name] = {"time_per_token_s": s["time_per_token_s"], "total_s": s["total_s"], "load_s": s["load_s"],
                            "request_s": s["load_s"] + s["total_s"]}
        own = p.model_copy(update={"policy": "planner", "codec": p.codec or opts.codec, "engine": own_engine()})
        modelled = _evaluable(own, found.ev_real) is not None
        if not (opts.any_placement and (modelled or len(req.model.units) < SIMPY_MAX_UNITS)):
            continue
        for tried in (own, own.model_copy(update={"gpu_offload_min_tokens": None})):
            try:
                summ = s if p.engine == own_engine() else simulated(req, tried, found.ev_real)
            except PlanError:
                continue
            best.offer(f"{name}-peer", tried, summ)
            break
    return base_times


def _given(req: Request, opts: PlanOptions, ev_real: Evaluator, best: Best) -> None:
    """Offer `best` the plans the result must not be worse than, as given (their own runtime)."""
    for name, p in (*opts.seeds.items(), *((f"floor-{k}", p) for k, p in opts.floors.items())):
        if not opts.any_placement:
            continue
        own = p.model_copy(update={"policy": "planner", "codec": p.codec or opts.codec})
        try:
            summ = simulated(req, own, ev_real)
        except (PlanError, Unsupported):  # a seed that does not fit these budgets bounds nothing
            continue
        best.offer(f"given-{name}", own, summ)


def _evaluable(p: Plan, ev: Evaluator) -> np.ndarray | None:
    """The plan's assignment where the evaluator models it: offloadsim's engine and runtime, every placement an
    option, and its codec, or no compressed placement (a codec plays no part in the schedule of such a plan)."""
    a = assignment_of(p) if p.engine == own_engine() and is_planner_runtime(p) else None
    return a if a is not None and (p.codec == ev.codec or not COMPRESSED[a].any()) else None


def simulated(req: Request, p: Plan, ev_real: Evaluator) -> dict:
    """fast_simulate's summary of `p`; by the judge's evaluator where it models the plan (the same figures to 1e-12,
    tests/test_planner_properties.py, without building a schedule: 0.2 s each for DeepSeek-R1)."""
    a = _evaluable(p, ev_real)
    if a is not None:
        s = ev_real.summary(a, settings_of(p))
        if s is not None:
            return s
    s = fast_simulate(req.model, req.machine, p, req.workload, req.budgets)  # raises PlanError when over budget
    s["load_s"] = load_time_s(req.model, req.machine, p, req.workload.warm)["total_s"]
    return s
