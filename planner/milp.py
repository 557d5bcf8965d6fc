"""The integer program on the analytic model (scipy.optimize.milp / HiGHS).

Minimise T subject to T >= the work each resource does over the request (compute chain, link, disk, unpack), one
option per unit (counted per group of identical units), and the VRAM, pinned and RAM budgets. The simulated time is
never below any resource's total work, so the optimum with the least staging is a lower bound for every plan.
"""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from planner.choices import OPTIONS
from sim.costs.tiers import TIER_ROWS
from planner.options import RESOURCES, OptionCosts


@dataclass(frozen=True)
class MilpResult:
    feasible: bool
    bound_s: float
    counts: list[np.ndarray]   # per group: units in each option


class Room(NamedTuple):
    """What the budgets leave the weights after staging, KV cache and activations (VRAM, pinned RAM, RAM); units
    larger than `slot_bytes` cannot be streamed to the GPU; `cache_all`: disk units must fit in the page cache."""
    vram: float
    pinned: float
    ram: float
    slot_bytes: float
    cache_all: bool


class Solver(NamedTuple):
    """`integral` False solves the linear relaxation (a weaker bound, solved faster). `rel_gap`: HiGHS stops once the
    incumbent is within this relative gap of the dual bound (deterministic, unlike the time limit; the bound stays a
    bound)."""
    time_limit_s: float = 5.0
    integral: bool = True
    rel_gap: float = 1e-4


def solve(costs: OptionCosts, groups: list[np.ndarray], room: Room, how: Solver = Solver()) -> MilpResult:
    """The least makespan over assignments of the groups to options within `room`, by HiGHS (`how`)."""
    vram_free, pinned_free, ram_free, slot_bytes, cache_all = room
    time_limit_s, integral, rel_gap = how
    k = len(OPTIONS)
    G = len(groups)
    nv = G * k + 1  # counts, then T
    rep = [g[0] for g in groups]
    size = np.array([len(g) for g in groups], dtype=float)
    c = np.zeros(nv)
    c[-1] = 1.0
    A, lo, hi = [], [], []
    for gi in range(G):  # one option per unit
        row = np.zeros(nv)
        row[gi * k:(gi + 1) * k] = 1
        A.append(row), lo.append(size[gi]), hi.append(size[gi])
    for r in RESOURCES:  # T >= sum of work
        row = np.zeros(nv)
        for gi, u in enumerate(rep):
            row[gi * k:(gi + 1) * k] = costs.work[r][u]
        row[-1] = -1
        A.append(row), lo.append(-np.inf), hi.append(0.0)
    for mat, free in ((costs.vram, vram_free), (costs.pinned, pinned_free)):
        row = np.zeros(nv)
        for gi, u in enumerate(rep):
            row[gi * k:(gi + 1) * k] = mat[u]
        A.append(row), lo.append(-np.inf), hi.append(free)
    row = np.zeros(nv)
    for gi, u in enumerate(rep):
        row[gi * k:(gi + 1) * k] = costs.ram[u] + costs.pinned[u] + (costs.disk[u] if cache_all else 0)
    A.append(row), lo.append(-np.inf), hi.append(ram_free)
    ub = np.zeros(nv)
    for gi, u in enumerate(rep):
        for j, (tier, dev) in enumerate(OPTIONS):
            streamed_gpu = dev == "gpu" and not TIER_ROWS[tier].resident
            ok = costs.allowed[u, j] and not (streamed_gpu and costs.nbytes[u] > slot_bytes)
            ub[gi * k + j] = size[gi] if ok else 0
    ub[-1] = np.inf
    vram, pinned, ram = A[-3:]
    if _no_fit([vram, pinned, ram, vram + ram], [vram_free, pinned_free, ram_free, vram_free + ram_free],
               ub[:-1].reshape(G, k) > 0, size):
        return MilpResult(False, float("inf"), [])   # what HiGHS reports, without the solve
    integrality = np.full(nv, 1.0 if integral else 0.0)
    integrality[-1] = 0
    with quiet_stdout():
        res = milp(c, integrality=integrality, bounds=Bounds(np.zeros(nv), ub),
                   constraints=LinearConstraint(np.array(A), lo, hi), options={"time_limit": time_limit_s, "disp": False, "mip_rel_gap": rel_gap})
    if res.x is None:
        return MilpResult(False, float("inf"), [])
    x = np.round(res.x[:-1]).astype(int).reshape(G, k)
    bound = getattr(res, "mip_dual_bound", None) if integral else None  # the LP optimum is its own bound
    if bound is None or not np.isfinite(bound):
        bound = res.fun if res.status == 0 else 0.0  # stopped early without a dual bound: only 0 is certain
    return MilpResult(True, float(bound), list(x))


def _no_fit(rows: list[np.ndarray], limits: list[float], allowed: np.ndarray, size: np.ndarray) -> bool:
    """Whether the least a memory row can hold (each group in its allowed option that takes least of it) exceeds its
    limit: then no assignment fits and the program is infeasible. The rows are the budgets' and the sum of the VRAM
    and RAM rows (implied by them); the margin is far above HiGHS's tolerances, so HiGHS finds it infeasible too."""
    for row, limit in zip(rows, limits):
        least = np.where(allowed, row[:-1].reshape(allowed.shape), np.inf).min(axis=1)
        if (size * least).sum() > limit + 1e-6 * abs(limit) + 1:
            return True
    return False


@contextlib.contextmanager
def quiet_stdout():
    """Send the C-level stdout (fd 1) to /dev/null: HiGHS can print a line even with disp=False, and `--json`
    output must stay parseable. Python-level output is flushed first so nothing is lost or reordered."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # a captured stdout (pytest, io.StringIO): no fd to guard
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
