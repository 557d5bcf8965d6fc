"""plan() and plan_with_report(): seeds (integer program, known placements, baselines) -> converged local search ->
the best of the search and every seed on the real workload -> SimPy confirmation and the lower bound.

Deterministic: the search stops on convergence (or exhaustion of a tiny instance), never on the clock; a time limit
exists only as a safety net and is reported (`PlanReport.stopped`) when it fires.
"""
from __future__ import annotations

import functools
import gc
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from hwmodels.specs import MachineSpec
from hwmodels.units import GiB, InputError
from planner.baselines import baseline_plans
from planner.bound import lower_bound
from planner.candidates import coarse_groups, milp_candidates
from planner.evaluator import COMPRESSED, Evaluator, assignment_of, is_planner_runtime, settings_of
from planner.choices import OPTIONS
from planner.options import option_costs, usage
from planner.search import EXACT_LIMIT, Outcome, Search, exact, exact_size
from planner.seeds import known_placements
from sim.costs.tiers import TIER_ROWS
from sim.costs.transfer import Codec, machine_codec
from sim.run.fast import Unsupported, warm_up
from sim.costs.memory import PlanError, activation_bytes, kv_cache_bytes, min_vram_bytes
from sim.plan import Budgets, Placement, Plan, Request, Workload
from sim.engines.placements import POLICIES
from sim.model.shapes import ModelShape
from sim.run.simulate import fast_simulate, simulate

SAFETY_S = 300.0   # wall-clock safety net of the search (reported when it fires; never the normal stop)
MAX_EVALS = 20_000  # deterministic safety net on the plans the search scores (reported when it fires)
SIMPY_MAX_UNITS = 2000  # larger models: confirmed by fast_simulate, not SimPy, and a peer's placement with its own
                        # runtime is a seed only where the evaluator models it (a schedule costs 0.3 s for DeepSeek-R1)


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


def check_budgets(machine: MachineSpec, budgets: Budgets) -> None:
    """Refuse budgets above the machine's hardware, naming the field, the value and the fix."""
    for name, value, cap, fix in (
            ("vram", budgets.vram_bytes, machine.gpu.vram_bytes,
             f"lower --vram to at most the {machine.gpu.name}'s VRAM or pick a GPU with more (whatif --vary gpu=...)"),
            ("ram", budgets.ram_bytes, machine.host_memory.capacity_bytes,
             "lower --ram to at most the machine's RAM or vary ram= in whatif"),
            ("pinned", budgets.pinned_bytes, machine.host_memory.capacity_bytes,
             "lower --pinned to at most the machine's RAM")):
        if value > cap:
            raise InputError(f"{name}: budget {value / GiB:.2f} GiB ({value} bytes) exceeds the {machine.name} "
                             f"machine's {cap / GiB:.2f} GiB; {fix}.")


def _infeasible(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    biggest = max(u.nbytes for u in model.units)
    need = min_vram_bytes(model, w)
    reason = (f"needs at least {need / GiB:.2f} GiB of VRAM (budget {budgets.vram_bytes / GiB:.2f} GiB): staging slot "
              f"for the largest unit {biggest / GiB:.2f} GiB + KV cache {kv_cache_bytes(model, w) / GiB:.2f} GiB + "
              f"activations {activation_bytes(model, w) / GiB:.2f} GiB; raise --vram or shorten the prompt/batch")
    if need <= budgets.vram_bytes:
        reason = (f"no placement fits RAM {budgets.ram_bytes / GiB:.2f} GiB and pinned {budgets.pinned_bytes / GiB:.2f} GiB "
                  "with a staging buffer for the largest unit; raise --ram or --pinned")
    placements = tuple(Placement(unit=u.name, tier="disk_raw") for u in model.units)
    return Plan(model=model.name, machine=machine.name, policy="planner", placements=placements, feasible=False,
                reason=reason)


def peer_plans(model, machine, w, budgets) -> dict[str, Plan | str]:
    """Every baseline (planner/baselines.py) and the streaming policy: a plan or why it cannot run."""
    out = baseline_plans(model, machine, w, budgets)
    try:
        out["stream"] = POLICIES["stream"](model, machine, w, budgets)
    except PlanError as exc:
        out["stream"] = str(exc)
    return out


def _objective(s: dict, objective: str) -> float:
    return s["time_per_token_s"] + 1e-9 * s["total_s"] if objective == "token" else s["total_s"]


def _collection_paused(fn):
    """Run `fn` with Python's cyclic garbage collector paused (restored after, if it was on). Planning allocates about
    a million short-lived containers (DeepSeek-R1: 15,000 placements per plan, schedule rows), whose collections cost
    0.5 s there; it frees them by reference counting and keeps no cycles it needs freed meanwhile."""
    @functools.wraps(fn)
    def paused(*args, **kw):
        enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kw)
        finally:
            if enabled:
                gc.enable()
    return paused


@_collection_paused
def plan_with_report(model: ModelShape, machine: MachineSpec, workload: Workload, budgets: Budgets, *,
                     codec: Codec | None = None, tiers: tuple[str, ...] | None = None, allow_cpu: bool = True,
                     time_budget_s: float | None = None, confirm: bool = True, objective: str = "token",
                     max_evals: int | None = None, progress: bool = False,
                     seeds: dict[str, Plan] | None = None) -> PlanReport:
    """Plan and report: the chosen plan, its SimPy summary, the lower bound, and every baseline's times.
    `time_budget_s` is only the safety net of the search (default 300 s); `max_evals` caps the plans scored
    (default 20,000; a deterministic safety net, reported when reached: descents end on their own long before).
    `progress`: a count of the plans scored on stderr, shown once planning takes over 2 s. `seeds`: plans the result must not be worse than (with
    their own loader settings), e.g. the plan for a smaller budget, which makes a sweep monotone by construction.
    Raises InputError for budgets above the machine's hardware."""
    check_budgets(machine, budgets)
    warm_up()
    t0 = time.perf_counter()
    codec = codec or machine_codec(machine)
    options = [o for o in OPTIONS if (tiers is None or o[0] in tiers) and (allow_cpu or o[1] == "gpu")
               and (codec is not None or not TIER_ROWS[o[0]].compressed) and o != ("ram_pinned", "cpu")]
    opt_idx = [OPTIONS.index(o) for o in options]
    real = workload
    search_w = workload.model_copy(update={"seed": workload.seed + 7919}) if model.is_moe else workload
    ev = Evaluator(Request(model, machine, search_w, budgets), codec)  # MoE: search on other draws than the judge's
    ev_real = Evaluator(Request(model, machine, real, budgets), codec, like=ev) if model.is_moe else ev
    use = usage(model, machine, search_w, ev=ev)
    costs = option_costs(model, machine, search_w, use, codec, True)
    gs, ordered = coarse_groups(costs, use, model)
    search = Search(ev, gs, opt_idx, objective, max_evals or MAX_EVALS,
                    SAFETY_S if time_budget_s is None else time_budget_s, ordered)
    if progress:  # stderr only, never stdout (`plan --json` must parse); appears after 2 s
        search.bar = tqdm(desc="planning (plans scored)", delay=2.0, file=sys.stderr, leave=False)
    try:
        out, scored, peers = _search(model, machine, real, search_w, budgets, use, codec, options, opt_idx, search,
                                     seeds or {})
    finally:
        if search.bar is not None:
            search.bar.close()

    # the judge: the search result and every seed on the real workload; peers with their own runtime too
    finalists = ([("search", out.assign, out.settings)] if out else []) + [(n, a, s) for n, a, s, _ in scored]
    return _judge(model, machine, real, budgets, codec, tiers, allow_cpu, objective, confirm, t0, options,
                  ev.evaluations, ev_real, out, scored, peers, finalists, seeds or {})


def _search(model, machine, real, search_w, budgets, use, codec, options, opt_idx, search: Search, given: dict):
    """Score every seed (integer program, known placements, peers) and search from them."""
    ev = search.ev
    starts: dict[str, np.ndarray] = {}
    for k, a in enumerate(milp_candidates(model, machine, search_w, budgets, use, codec, options)):
        starts[f"milp-{k}"] = a
    starts.update(known_placements(ev, use))
    peers = peer_plans(model, machine, real, budgets)
    plans = {**peers, **{f"given-{k}": p for k, p in given.items()}}
    assigns = {name: assignment_of(p) for name, p in plans.items() if not isinstance(p, str)}
    allowed = np.zeros(len(OPTIONS), dtype=bool)
    allowed[opt_idx] = True

    def usable(a: np.ndarray | None) -> bool:  # every unit placed, in an allowed option
        return a is not None and bool((a >= 0).all() and allowed[a].all())

    starts.update({name: assigns[name] for name in peers if usable(assigns.get(name))})
    scored = []
    for name, a in starts.items():
        if not usable(a):
            continue
        s, t = search.best_settings(a)
        if s is not None:
            scored.append((name, a, s, t))
    for name, p in plans.items():  # own loader settings, where the evaluator models them
        a = assigns.get(name)
        if usable(a) and is_planner_runtime(p):
            t = search.score(a, settings_of(p))
            if t < float("inf"):
                scored.append((f"{name}-own", a, settings_of(p), t))

    if exact_size(len(model.units), len(opt_idx)) <= EXACT_LIMIT:  # tiny: search it all and stop
        out = exact(search)
    elif scored:
        out = search.run([(a, s, t) for _, a, s, t in scored])
    else:
        out = None
    return out, scored, peers


def _judge(model, machine, real, budgets, codec, tiers, allow_cpu, objective, confirm, t0, options, evaluations: int,
           ev_real, out, scored, peers, finalists, given: dict) -> PlanReport:
    """The best of the search and every seed and peer on the real workload, confirmed, with the bound.
    `evaluations`: the plans the search scored (the judge scores with the search's evaluator on dense models)."""
    best, best_t, seeds = None, float("inf"), {}
    for name, a, s in finalists:
        summ = ev_real.summary(a, s)
        if summ is None:
            continue
        t = _objective(summ, objective)
        seeds[name] = t
        if t < best_t * (1 - 1e-12):  # the plan (15,000 placements for DeepSeek-R1) is built once, at the end
            best, best_t = (name, (a, s)), t
    base_times = {}
    for name, p in peers.items():
        if isinstance(p, str):
            base_times[name] = {"error": p}
            continue
        s = _simulated(model, machine, p, real, budgets, ev_real)
        base_times[name] = {"time_per_token_s": s["time_per_token_s"], "total_s": s["total_s"]}
        own = p.model_copy(update={"policy": "planner", "codec": p.codec or codec, "engine": "offloadsim"})
        modelled = _evaluable(own, ev_real) is not None
        if tiers is None and allow_cpu and (modelled or len(model.units) < SIMPY_MAX_UNITS):
            # the peer's placement run by offloadsim's engine (without the peer's costs); where offloadsim's staging
            # slot for a prompt's copies of CPU-held units does not fit (llama.cpp copies a tensor at a time), with
            # those units computed on the CPU instead
            t = None
            for tried in (own, own.model_copy(update={"gpu_offload_min_tokens": None})):
                try:
                    t = _objective(s if p.engine == "offloadsim" else
                                   _simulated(model, machine, tried, real, budgets, ev_real), objective)
                    own = tried
                    break
                except PlanError:
                    continue
            if t is None:
                continue
            seeds[f"{name}-peer"] = t
            if t < best_t * (1 - 1e-12):
                best, best_t = (f"{name}-peer", own), t
    for name, p in given.items():  # plans the result must not be worse than, as given (their own runtime)
        if tiers is None and allow_cpu:
            own = p.model_copy(update={"policy": "planner", "codec": p.codec or codec})
            try:
                t = _objective(_simulated(model, machine, own, real, budgets, ev_real), objective)
            except (PlanError, Unsupported):  # a seed that does not fit these budgets bounds nothing
                continue
            seeds[f"given-{name}"] = t
            if t < best_t * (1 - 1e-12):
                best, best_t = (f"given-{name}", own), t
    bound = lower_bound(ev_real, options)
    stopped = out.stopped if out else "no feasible seed"
    if best is None:
        return PlanReport(_infeasible(model, machine, real, budgets), baselines=base_times, lower_bound_s=bound,
                          candidates=len(scored), seconds=time.perf_counter() - t0, stopped=stopped,
                          evaluations=evaluations, converged=out.converged if out else True)
    chosen_from, plan = best
    if not isinstance(plan, Plan):
        plan = ev_real.plan(*plan)
    summary = {}
    if confirm:
        summary = simulate(model, machine, plan, real, budgets).summary if len(model.units) < SIMPY_MAX_UNITS else \
            fast_simulate(model, machine, plan, real, budgets)
    return PlanReport(plan, summary, bound, base_times, len(scored), time.perf_counter() - t0,
                      converged=out.converged if out else True, stopped=stopped, evaluations=evaluations,
                      seeds=seeds, chosen_from=chosen_from)


def _evaluable(p: Plan, ev: Evaluator) -> np.ndarray | None:
    """The plan's assignment where the evaluator models it: offloadsim's engine and runtime, every placement an
    option, and its codec, or no compressed placement (a codec plays no part in the schedule of such a plan)."""
    a = assignment_of(p) if p.engine == "offloadsim" and is_planner_runtime(p) else None
    return a if a is not None and (p.codec == ev.codec or not COMPRESSED[a].any()) else None


def _simulated(model, machine, p: Plan, real: Workload, budgets: Budgets, ev_real: Evaluator) -> dict:
    """fast_simulate's summary of `p`; by the judge's evaluator where it models the plan (the same figures to 1e-12,
    tests/test_planner_properties.py, without building a schedule: 0.2 s each for DeepSeek-R1)."""
    a = _evaluable(p, ev_real)
    if a is not None:
        s = ev_real.summary(a, settings_of(p))
        if s is not None:
            return s
    return fast_simulate(model, machine, p, real, budgets)  # raises PlanError when over budget


def plan(model: ModelShape, machine: MachineSpec, workload: Workload, budgets: Budgets, **kw) -> Plan:
    """The chosen plan (frozen); infeasible budgets give feasible=False and a reason naming the fix."""
    return plan_with_report(model, machine, workload, budgets, confirm=False, **kw).plan


__all__ = ["PlanReport", "check_budgets", "plan", "plan_with_report", "peer_plans", "Outcome"]
