"""plan() and plan_with_report(): seeds (integer program, known placements, baselines) -> converged local search ->
the best of the search and every seed on the real workload -> SimPy confirmation and the lower bound.

Deterministic: the search stops on convergence (or exhaustion of a tiny instance), never on the clock; a time limit
exists only as a safety net and is reported (`PlanReport.stopped`) when it fires.
"""
from __future__ import annotations

import dataclasses
import functools
import gc
import sys
import time

import numpy as np
from tqdm import tqdm

from hwmodels.specs import MachineSpec
from hwmodels.units import GiB, InputError
from planner.baselines import baseline_plans
from planner.bound import PlanFloor
from planner.candidates import coarse_groups, milp_candidates
from planner.choices import OPTIONS
from planner.evaluator import Evaluator, assignment_of, is_planner_runtime, settings_of
from planner.judge import Found, PlanOptions, PlanReport, judge
from planner.options import Usage, option_costs, usage
from planner.search import EXACT_LIMIT, Limits, Outcome, Search, exact, exact_size
from planner.seeds import known_placements
from sim.costs.memory import PlanError
from sim.costs.transfer import machine_codec
from sim.engines.placements import POLICIES
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Request, Workload
from sim.run.fast import warm_up

SAFETY_S = 300.0   # wall-clock safety net of the search (reported when it fires; never the normal stop)
MAX_EVALS = 20_000  # deterministic safety net on the plans the search scores (reported when it fires)
MOE_SEARCH_SEED = 7919  # an MoE is searched on other expert draws than the judge's: this far from the request's seed


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


def peer_plans(req: Request) -> dict[str, Plan | str]:
    """Every baseline (planner/baselines.py) and the streaming policy: a plan or why it cannot run."""
    out = baseline_plans(req)
    try:
        out["stream"] = POLICIES["stream"](req.model, req.machine, req.workload, req.budgets)
    except PlanError as exc:
        out["stream"] = str(exc)
    return out


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


def plan_with_report(model: ModelShape, machine: MachineSpec, workload: Workload, budgets: Budgets,
                     **options) -> PlanReport:
    """Plan and report: the chosen plan, its SimPy summary, the lower bound, and every baseline's times. Keywords:
    PlanOptions' fields. `time_budget_s` is only the safety net of the search (default 300 s); `max_evals` caps the
    plans scored (default 20,000; a deterministic safety net, reported when reached: descents end on their own long
    before). `progress`: a count of the plans scored on stderr, shown once planning takes over 2 s. `seeds`: plans
    the result must not be worse than (with their own loader settings), e.g. the plan for a smaller budget, which
    makes a sweep monotone by construction. Raises InputError for budgets above the machine's hardware."""
    options["seeds"] = options.get("seeds") or {}
    return plan_request(Request(model, machine, workload, budgets), PlanOptions(**options))


@_collection_paused
def plan_request(req: Request, opts: PlanOptions) -> PlanReport:
    """plan_with_report for a request and its options."""
    check_budgets(req.machine, req.budgets)
    warm_up()
    t0 = time.perf_counter()
    opts = dataclasses.replace(opts, codec=opts.codec or machine_codec(req.machine))
    search, use = _searcher(req, opts)
    # MoE: the judge scores on the request's own draws, with the search's per-size rows
    ev_real = Evaluator(req, opts.codec, like=search.ev) if req.model.is_moe else search.ev
    if opts.progress:  # stderr only, never stdout (`plan --json` must parse); appears after 2 s
        search.bar = tqdm(desc="planning (plans scored)", delay=2.0, file=sys.stderr, leave=False)
    try:
        out, scored, peers = _search(req, opts, search, use)
    finally:
        if search.bar is not None:
            search.bar.close()
    return judge(req, opts, Found(out, scored, peers, search.ev.evaluations, ev_real), t0)


def _searcher(req: Request, opts: PlanOptions) -> tuple[Search, Usage]:
    """The search over the allowed options, its evaluator on the search's workload (an MoE's other expert draws),
    and the units' use there."""
    w = req.workload
    search_req = req.replace(workload=w.model_copy(update={"seed": w.seed + MOE_SEARCH_SEED})) \
        if req.model.is_moe else req
    ev = Evaluator(search_req, opts.codec)
    use = usage(search_req, ev=ev)
    costs = option_costs(search_req, use, opts.codec, True)
    gs, ordered = coarse_groups(costs, use, req.model)
    opt_idx = [OPTIONS.index(o) for o in opts.allowed()]
    limits = Limits(opts.max_evals or MAX_EVALS, SAFETY_S if opts.time_budget_s is None else opts.time_budget_s)
    search = Search(ev, gs, opt_idx, opts.objective, limits, ordered)
    search.floor = PlanFloor(ev)
    return search, use


def _starts(req: Request, opts: PlanOptions, search: Search, use: Usage) -> tuple[dict, dict, dict, dict]:
    """Starting assignments (integer program, known placements, usable peers' plans), the peers' plans (or why they
    cannot run), the peers' and given plans, and their assignments."""
    starts: dict[str, np.ndarray] = {}
    search_req = search.ev.req
    for k, a in enumerate(milp_candidates(search_req, use, opts.codec, opts.allowed())):
        starts[f"milp-{k}"] = a
    starts.update(known_placements(search.ev, use))
    peers = peer_plans(req)
    plans = {**peers, **{f"given-{k}": p for k, p in opts.seeds.items()}}
    assigns = {name: assignment_of(p) for name, p in plans.items() if not isinstance(p, str)}
    starts.update({name: assigns[name] for name in peers if _usable(search, assigns.get(name))})
    return starts, peers, plans, assigns


def _usable(search: Search, a: np.ndarray | None) -> bool:
    """Every unit placed, in an allowed option."""
    return a is not None and bool((a >= 0).all() and np.isin(a, search.options).all())


def _search(req: Request, opts: PlanOptions, search: Search, use: Usage) -> tuple[Outcome | None, list, dict]:
    """Score every seed (integer program, known placements, peers) and search from them."""
    starts, peers, plans, assigns = _starts(req, opts, search, use)
    scored = []
    for name, a in starts.items():
        if not _usable(search, a):
            continue
        s, t = search.best_settings(a)
        if s is not None:
            scored.append((name, a, s, t))
    for name, p in plans.items():  # own loader settings, where the evaluator models them
        a = assigns.get(name)
        if _usable(search, a) and is_planner_runtime(p):
            t = search.score(a, settings_of(p))
            if t < float("inf"):
                scored.append((f"{name}-own", a, settings_of(p), t))
    if exact_size(len(req.model.units), len(search.options)) <= EXACT_LIMIT:  # tiny: search it all and stop
        out = exact(search)
    elif scored:
        out = search.run([(a, s, t) for _, a, s, t in scored])
    else:
        out = None
    return out, scored, peers


def plan(model: ModelShape, machine: MachineSpec, workload: Workload, budgets: Budgets, **kw) -> Plan:
    """The chosen plan (frozen); infeasible budgets give feasible=False and a reason naming the fix."""
    return plan_with_report(model, machine, workload, budgets, confirm=False, **kw).plan


__all__ = ["PlanOptions", "PlanReport", "check_budgets", "plan", "plan_request", "plan_with_report", "peer_plans",
           "Outcome"]
