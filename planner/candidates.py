"""Starting assignments from the integer program, and the unit groups the local search moves together."""
from __future__ import annotations

import dataclasses

import numpy as np

from planner.milp import Room, Solver, solve
from planner.choices import OPTIONS
from planner.options import OptionCosts, groups, option_costs, row_classes
from planner.search import spread
from sim.costs.memory import activation_bytes
from sim.costs.tiers import TIER_ROWS
from sim.plan import Request

STAGED = {(t, "gpu") for t, row in TIER_ROWS.items() if row.staged}  # GPU options through a pinned slot
MAX_GROUPS = 40


def unit_groups(costs: OptionCosts) -> list[np.ndarray]:
    """planner.options.groups, computed on one unit per distinct cost row and spread back: the same groups in the same
    order (its scale is a maximum over rows, the same over the distinct ones), 0.2 s less per call for 15,000 units."""
    arrays = [*costs.work.values(), costs.vram, costs.pinned, costs.ram, costs.disk, costs.allowed,
              costs.nbytes[:, None]]
    first, inverse = row_classes(np.concatenate([a.astype(float) for a in arrays], axis=1))
    order = np.argsort(first)                       # distinct rows in model order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    reps = first[order]
    sub = OptionCosts({r: w[reps] for r, w in costs.work.items()}, costs.vram[reps], costs.pinned[reps],
                      costs.ram[reps], costs.disk[reps], costs.allowed[reps], costs.nbytes[reps])
    row_rank = rank[inverse]
    return [np.flatnonzero(np.isin(row_rank, g)) for g in groups(sub)]


def milp_candidates(req: Request, use, codec, options) -> list[np.ndarray]:
    """Assignments from the integer program over: page cache assumed to hold the disk units or not, staging sized for
    the 3 largest unit sizes, 2 or 3 VRAM slots, pinned staging reserved or host-staged tiers forbidden."""
    model, budgets = req.model, req.budgets
    act = activation_bytes(model, req.workload)  # the KV cache is in the options' costs (planner.options.add_kv_cache)
    sizes = sorted({u.nbytes for u in model.units}, reverse=True)[:3]
    out: list[np.ndarray] = []
    seen = set()
    allowed_idx = [OPTIONS.index(o) for o in options]
    for cached in (True, False):
        costs = option_costs(req, use, codec, cached)
        mask = np.zeros(len(OPTIONS), dtype=bool)
        mask[allowed_idx] = True
        costs.allowed[:, ~mask] = False
        gs = unit_groups(costs)
        for slot in sizes:
            for slots in (2, 3):
                for staged in (False, True):
                    if staged and not any(o in STAGED for o in options):
                        continue
                    c = costs
                    if not staged:
                        allowed = costs.allowed.copy()
                        allowed[:, [OPTIONS.index(o) for o in STAGED]] = False
                        c = dataclasses.replace(costs, allowed=allowed)
                    reserve = 2 * slot if staged else 0
                    room = Room(budgets.vram_bytes - act - slots * slot, budgets.pinned_bytes - reserve,
                                budgets.ram_bytes - reserve, slot, cached)
                    res = solve(c, gs, room, Solver(time_limit_s=2.0, rel_gap=0.02))
                    if not res.feasible:
                        continue
                    assign = np.zeros(len(model.units), dtype=np.int64)
                    for g, counts in zip(gs, res.counts):  # OPTIONS indices, evenly spread over the group
                        assign[g] = spread({j: int(n) for j, n in enumerate(counts)}, len(g))
                    key = tuple(assign.tolist())
                    if key not in seen:
                        seen.add(key)
                        out.append(assign)
    return out


def coarse_groups(costs, use, model) -> tuple[list[np.ndarray], list[bool]]:
    """Units with identical costs move together; past MAX_GROUPS groups, units of one kind form a group, most used
    first (so a move can take the most or the least used of them)."""
    gs = unit_groups(costs)
    if len(gs) <= MAX_GROUPS:
        return gs, [False] * len(gs)
    kinds: dict[str, list[int]] = {}
    for i, u in enumerate(model.units):
        kinds.setdefault(u.kind, []).append(i)
    out = [np.array(sorted(idx, key=lambda i: (-use.uses[i], i)), dtype=np.int64) for idx in kinds.values()]
    return out, [True] * len(out)
