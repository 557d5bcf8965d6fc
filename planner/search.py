"""Evaluate candidate plans with the fast evaluator and improve them by local moves; exact search when small."""
from __future__ import annotations

import itertools
import time

import numpy as np

from hwmodels.specs import MachineSpec
from sim.equations import Codec
from sim.memory import PlanError
from sim.plan import Budgets, Placement, Plan, Workload
from sim.simulate import fast_simulate
from sim.shapes import ModelShape

# (prefetch depth, VRAM slots, pinned slots) the planner tries
LOADER_SETTINGS = ((1, 2, 2), (2, 3, 3), (3, 4, 3), (0, 1, 1))


def spread(counts: dict[tuple[str, str], int], n: int) -> list[tuple[str, str]]:
    """Assign options to n positions so each option's positions are evenly spread (largest-deficit rule)."""
    opts = [o for o, c in counts.items() if c > 0]
    given = {o: 0 for o in opts}
    out = []
    for p in range(n):
        o = max(opts, key=lambda o: (counts[o] * (p + 1) / n - given[o], counts[o]))
        given[o] += 1
        out.append(o)
    return out


def build(model: ModelShape, machine: MachineSpec, assignment: list[tuple[str, str]], settings: tuple[int, int, int],
          codec: Codec | None) -> Plan:
    depth, slots, pins = settings
    placements = tuple(Placement(unit=u.name, tier=t, compute=d) for u, (t, d) in zip(model.units, assignment))
    return Plan(model=model.name, machine=machine.name, policy="planner", placements=placements, prefetch_depth=depth,
                vram_slots=slots, pinned_slots=pins, codec=codec)


OBJECTIVES = {"token": "time_per_token_s", "total": "total_s"}


def score(model, machine, plan: Plan, w, budgets, objective: str = "token") -> float | None:
    """The objective by the fast evaluator (time per token, ties broken by the total), or None if over budget."""
    try:
        s = fast_simulate(model, machine, plan, w, budgets)
    except PlanError:
        return None
    return s[OBJECTIVES[objective]] + 1e-9 * s["total_s"]


def best_settings(model, machine, assignment, w, budgets, codec, objective="token",
                  slots: int | None = None) -> tuple[Plan | None, float]:
    """The best loader settings for an assignment (those with `slots` VRAM slots if given), and, with CPU units,
    whether big steps run them on the GPU."""
    best, best_t = None, float("inf")
    offloads = (None, 32) if any(d == "cpu" for _, d in assignment) else (None,)
    for s in LOADER_SETTINGS:
        if slots is not None and s[1] != slots:
            continue
        for off in offloads:
            plan = build(model, machine, assignment, s, codec).model_copy(update={"gpu_offload_min_tokens": off})
            t = score(model, machine, plan, w, budgets, objective)
            if t is not None and t < best_t:
                best, best_t = plan, t
    return best, best_t


def _moves(best: Plan, groups: list[np.ndarray], options: list[tuple[str, str]]):
    """Trial assignments: one unit of a group (the middle one of those sharing an option) to another option."""
    assign = [(p.tier, p.compute) for p in best.placements]
    for g in groups:
        for a in sorted({assign[i] for i in g}):
            members = [i for i in g if assign[i] == a]
            victim = members[len(members) // 2]
            for b in options:
                if b != a:
                    trial = list(assign)
                    trial[victim] = b
                    yield trial


def _descend(model, machine, best: Plan, best_t: float, w, budgets, groups, options, deadline, objective):
    """First-improvement unit moves; when none improves, the loader settings; until a local optimum or the deadline."""
    while time.perf_counter() < deadline:
        improved = False
        for trial in _moves(best, groups, options):
            if time.perf_counter() > deadline:
                break
            plan = build(model, machine, trial, (best.prefetch_depth, best.vram_slots, best.pinned_slots),
                         best.codec).model_copy(update={"gpu_offload_min_tokens": best.gpu_offload_min_tokens})
            t = score(model, machine, plan, w, budgets, objective)
            if t is None:  # over budget with these settings: maybe with fewer staging slots
                plan, t = best_settings(model, machine, trial, w, budgets, best.codec, objective)
            if plan is not None and t is not None and t < best_t * (1 - 1e-9):
                best, best_t, improved = plan, t, True
                break
        if not improved:
            if time.perf_counter() > deadline:
                break
            plan, t = best_settings(model, machine, [(p.tier, p.compute) for p in best.placements], w, budgets,
                                    best.codec, objective)
            if plan is None or t >= best_t * (1 - 1e-9):
                break
            best, best_t = plan, t
    return best, best_t


def local_search(model, machine, starts: list[tuple[Plan, float]], w, budgets, groups: list[np.ndarray],
                 options: list[tuple[str, str]], deadline: float, objective: str = "token") -> tuple[Plan, float]:
    """Descend from each start in turn (best first); with time left, iterated local search: kick the best plan
    (a few units to random options, seeded) and descend again. Returns the best plan seen."""
    overall, overall_t = min(starts, key=lambda s: s[1])
    for start, start_t in sorted(starts, key=lambda s: s[1]):
        best, best_t = _descend(model, machine, start, start_t, w, budgets, groups, options, deadline, objective)
        if best_t < overall_t:
            overall, overall_t = best, best_t
        if time.perf_counter() > deadline:
            return overall, overall_t
    rng = np.random.default_rng(0)
    n = len(model.units)
    while time.perf_counter() < deadline:
        assign = [(p.tier, p.compute) for p in overall.placements]
        for i in rng.choice(n, size=min(n, int(rng.integers(2, 4))), replace=False):
            assign[i] = options[int(rng.integers(len(options)))]
        plan, t = best_settings(model, machine, assign, w, budgets, overall.codec, objective)
        if plan is None:
            continue
        plan, t = _descend(model, machine, plan, t, w, budgets, groups, options, deadline, objective)
        if t < overall_t * (1 - 1e-9):
            overall, overall_t = plan, t
    return overall, overall_t


EXACT_LIMIT = 30_000  # assignments x loader settings searched exhaustively


def exact(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets, options: list[tuple[str, str]],
          codec: Codec | None, objective: str = "token") -> tuple[Plan | None, float]:
    """Every assignment x loader setting that fits the budgets, scored by the fast evaluator (small instances)."""
    best, best_t = None, float("inf")
    for combo in itertools.product(options, repeat=len(model.units)):
        for s in LOADER_SETTINGS:
            plan = build(model, machine, list(combo), s, codec)
            t = score(model, machine, plan, w, budgets, objective)
            if t is not None and t < best_t:
                best, best_t = plan, t
    return best, best_t
