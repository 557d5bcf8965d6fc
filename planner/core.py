"""plan() and plan_with_report(): MILP candidates + baselines -> local search -> SimPy confirmation."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from hwmodels.specs import MachineSpec
from planner.baselines import baseline_plans
from planner.milp import solve
from planner.options import OPTIONS, groups, option_costs, usage
from planner.search import EXACT_LIMIT, LOADER_SETTINGS, best_settings, exact, local_search, score, spread
from sim.equations import Codec, machine_codec
from sim.fast import warm_up
from sim.memory import activation_bytes, kv_cache_bytes, min_vram_bytes
from sim.plan import Budgets, Placement, Plan, Workload
from sim.shapes import ModelShape

GiB = 2**30


@dataclass(frozen=True)
class PlanReport:
    plan: Plan
    summary: dict = field(default_factory=dict)          # SimPy confirmation of the chosen plan
    lower_bound_s: float = float("nan")                  # MILP bound on the request's total time
    baselines: dict = field(default_factory=dict)        # name -> {"time_per_token_s", "total_s"} or {"error"}
    candidates: int = 0
    seconds: float = 0.0

    @property
    def gap(self) -> float:
        """Relative gap of the simulated total time to the lower bound."""
        return self.summary["total_s"] / self.lower_bound_s - 1 if self.summary and self.lower_bound_s > 0 else float("nan")


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


STAGED = {("ram_compressed", "gpu"), ("disk_raw", "gpu"), ("disk_compressed", "gpu")}


def _milp_candidates(model, machine, w, budgets, use, codec, options, deadline) -> tuple[list[tuple[list, int]], float]:
    """(assignment, VRAM slots) from the integer program over: page cache assumed to hold the disk units or not,
    staging sized for the 3 largest unit sizes, 2 or 3 VRAM slots, pinned staging reserved or host-staged tiers
    forbidden; and the lower bound (optimistic reads, least staging)."""
    kv, act = kv_cache_bytes(model, w), activation_bytes(model, w)
    sizes = sorted({u.nbytes for u in model.units}, reverse=True)[:3]
    out = []
    allowed_idx = [OPTIONS.index(o) for o in options]
    for cached in (True, False):
        costs = option_costs(model, machine, w, use, codec, cached)
        mask = np.zeros(len(OPTIONS), dtype=bool)
        mask[allowed_idx] = True
        costs.allowed[:, ~mask] = False
        gs = groups(costs)
        for slot in sizes:
            for slots in (2, 3):
                for staged in (False, True):
                    if time.perf_counter() > deadline or (staged and not any(o in STAGED for o in options)):
                        continue
                    c = costs
                    if not staged:
                        allowed = costs.allowed.copy()
                        allowed[:, [OPTIONS.index(o) for o in STAGED]] = False
                        c = dataclasses.replace(costs, allowed=allowed)
                    reserve = 2 * slot if staged else 0
                    res = solve(c, gs, budgets.vram_bytes - kv - act - slots * slot, budgets.pinned_bytes - reserve,
                                budgets.ram_bytes - reserve, slot, cached, time_limit_s=2.0)
                    if not res.feasible:
                        continue
                    assign: list = [None] * len(model.units)
                    for g, counts in zip(gs, res.counts):
                        opts = spread({OPTIONS[j]: int(n) for j, n in enumerate(counts)}, len(g))
                        for i, o in zip(g, opts):
                            assign[i] = o
                    if (assign, slots) not in out:
                        out.append((assign, slots))
    # lower bound: every read after the first at page-cache speed, one staging slot, nothing pinned for staging
    costs = option_costs(model, machine, w, use, codec, cached=True)
    costs.allowed[:, [j for j in range(len(OPTIONS)) if j not in allowed_idx]] = False
    lb = solve(costs, groups(costs), budgets.vram_bytes - kv - act - min(sizes), budgets.pinned_bytes,
               budgets.ram_bytes, max(sizes), False, time_limit_s=2.0)
    return out, lb.bound_s if lb.feasible else float("nan")


def plan_with_report(model: ModelShape, machine: MachineSpec, workload: Workload, budgets: Budgets, *,
                     codec: Codec | None = None, tiers: tuple[str, ...] | None = None, allow_cpu: bool = True,
                     time_budget_s: float | None = None, confirm: bool = True, objective: str = "token") -> PlanReport:
    """Plan and report: the chosen plan, its SimPy summary, the lower bound, and every baseline's times."""
    warm_up()  # the numba compile must not eat the search budget
    t0 = time.perf_counter()
    if time_budget_s is None:  # about 0.6 s of search for a dense model, 4 s for an expert-level 671B
        time_budget_s = min(4.0, 0.6 + len(model.units) / 4000)
    deadline = t0 + time_budget_s
    codec = codec or machine_codec(machine)
    options = [o for o in OPTIONS if (tiers is None or o[0] in tiers) and (allow_cpu or o[1] == "gpu")]
    use = usage(model, machine, workload)
    real_workload = workload
    if model.is_moe:  # search on other draws than the ones the confirmation uses: no overfitting to a seed
        workload = workload.model_copy(update={"seed": workload.seed + 7919})
    assigns, bound = _milp_candidates(model, machine, workload, budgets, use, codec, options, deadline)
    starts: list[tuple[Plan, float]] = []
    n = 0
    for assign, slots in assigns:
        if time.perf_counter() > deadline and starts:
            break
        p, t = best_settings(model, machine, assign, workload, budgets, codec, objective, slots)
        n += 1
        if p is not None:
            starts.append((p, t))
    base = baseline_plans(model, machine, workload, budgets)
    base_times = {}
    for name, p in base.items():
        if isinstance(p, str):
            base_times[name] = {"error": p}
            continue
        base_times[name] = {}
        assign = [(q.tier, q.compute) for q in p.placements]
        if all(a in options for a in assign):  # the baseline's placement with the planner's loader settings
            q, t = best_settings(model, machine, assign, workload, budgets, codec, objective)
            if q is not None:
                starts.append((q, t))
        if tiers is None and allow_cpu:  # and the baseline itself, runtime and all
            t = score(model, machine, p, workload, budgets, objective)
            if t is not None:
                starts.append((p.model_copy(update={"policy": "planner", "codec": codec}), t))
        n += 1
    if len(options) ** len(model.units) * len(LOADER_SETTINGS) <= EXACT_LIMIT:  # small: search it all
        p, t = exact(model, machine, workload, budgets, options, codec, objective)
        if p is not None:
            starts.append((p, t))
    if not starts:
        return PlanReport(_infeasible(model, machine, workload, budgets), baselines=base_times, lower_bound_s=bound,
                          candidates=n, seconds=time.perf_counter() - t0)
    costs = option_costs(model, machine, workload, use, codec, True)
    starts = sorted(starts, key=lambda s: s[1])[:3]
    best, best_t = local_search(model, machine, starts, workload, budgets, groups(costs), options, deadline, objective)
    summary = {}
    if confirm:
        from sim.simulate import fast_simulate, simulate
        summary = simulate(model, machine, best, real_workload, budgets).summary if len(model.units) < 2000 else \
            fast_simulate(model, machine, best, real_workload, budgets)
        for name, p in base.items():
            if not isinstance(p, str):
                s = fast_simulate(model, machine, p, real_workload, budgets)
                base_times[name] = {"time_per_token_s": s["time_per_token_s"], "total_s": s["total_s"]}
    return PlanReport(best, summary, bound, base_times, n, time.perf_counter() - t0)


def plan(model: ModelShape, machine: MachineSpec, workload: Workload, budgets: Budgets, **kw) -> Plan:
    """The chosen plan (frozen); infeasible budgets give feasible=False and a reason naming the fix."""
    return plan_with_report(model, machine, workload, budgets, confirm=False, **kw).plan
