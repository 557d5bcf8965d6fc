"""Deterministic local search over assignments, scored by planner.evaluator; exhaustive search when tiny.

The search stops on convergence: a descent ends when no move in the neighbourhood improves the objective, and the
iterated local search makes at most a fixed number of seeded kicks; descents after the first begin only while a
deterministic exploration budget lasts (plans scored x schedule items), so a model of 15,000 units converges in one.
Nothing reads a clock except the safety net, which is reported when it fires. Evaluations are counted; `max_evals`
is a second, deterministic safety net.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from planner.evaluator import Evaluator, Settings, objective_value
from planner.choices import OPTIONS
from sim.engines.common import OFFLOAD_MIN_TOKENS

# (prefetch depth, VRAM slots, pinned slots) the planner tries, each without and with the prefill offload of CPU units
LOADER_SETTINGS = ((1, 2, 2), (2, 3, 3), (3, 4, 3), (0, 1, 1))
LEAST_MEMORY = (0, 1, 1, None)   # the setting with the least staging: an assignment over budget with it fits none
EXACT_LIMIT = 30_000      # assignments x loader settings searched exhaustively
KICKS = 8                 # seeded kicks of the iterated local search, at most
FUTILE_KICKS = 2          # ... ending after this many in a row that improve nothing
EXPLORE_ITEMS = 5_000_000  # a descent (from a further start, or after a kick) begins only while the plans scored so
                           # far times the schedule's items are below this; every descent begun runs to its end
IMPROVES = 1 - 1e-9       # a move must improve by more than this relative amount
SWAP_ALL = 24             # models of this many units or fewer try every swap of two units' options, and every
                          # move and swap with every loader setting


@functools.lru_cache(maxsize=256)
def _spread(counts: tuple[tuple[Hashable, int], ...], n: int) -> tuple[Hashable, ...]:
    opts = [(o, c) for o, c in counts if c > 0]
    given = [0] * len(opts)
    out = []
    for p in range(n):
        k = max(range(len(opts)), key=lambda k: (opts[k][1] * (p + 1) / n - given[k], opts[k][1]))
        given[k] += 1
        out.append(opts[k][0])
    return tuple(out)


def spread(counts: dict[Hashable, int], n: int) -> list[Hashable]:
    """Assign options (any keys: OPTIONS or their indices) to n positions so each option's positions are evenly spread
    (largest-deficit rule). Memoised: the integer program's 24 variants often give a group the same counts (15,000
    experts each time)."""
    return list(_spread(tuple(counts.items()), n))


@dataclass
class Outcome:
    assign: np.ndarray
    settings: Settings
    score: float
    converged: bool
    stopped: str          # "converged", "exhaustive", "evaluation limit" or "time limit (safety net)"


class Limits(NamedTuple):
    """The search's safety nets: plans it may score, and wall-clock seconds (reported when either fires)."""
    max_evals: int = 20_000
    time_limit_s: float = 300.0


class Search:
    """Scores assignments and improves them; `groups` are index arrays of units that move together (ordered by use,
    most used first), `options` the allowed OPTIONS indices."""

    def __init__(self, ev: Evaluator, groups: list[np.ndarray], options: list[int], objective: str = "token",
                 limits: Limits = Limits(), ordered: list[bool] | None = None):
        self.ev, self.groups, self.options, self.objective = ev, groups, options, objective
        self.ordered = ordered or [False] * len(groups)
        self.max_evals, self.deadline = limits.max_evals, time.perf_counter() + limits.time_limit_s
        self.stopped = ""
        self.seen: dict[tuple[bytes, Settings], float] = {}   # scores already computed (moves revisit plans)
        self.fits: dict[bytes, bool] = {}   # assignments that fit the budgets with the least staging
        self.bar = None   # a tqdm bar on stderr (set by the caller), advanced per plan scored
        self.floor = None   # a planner.bound.PlanFloor (set by the caller): moves it proves no better are not scored

    def explored(self) -> bool:
        """The exploration budget is spent: no further descent begins (the one running ends at a local optimum)."""
        return self.ev.evaluations * len(self.ev.unit) >= EXPLORE_ITEMS

    def out_of_budget(self) -> bool:
        if self.ev.evaluations >= self.max_evals:
            self.stopped = "evaluation limit"
        elif time.perf_counter() > self.deadline:  # safety net only; reported, never the normal stop
            self.stopped = "time limit (safety net)"
        return bool(self.stopped)

    @staticmethod
    def key(assign: np.ndarray) -> bytes:
        """A 128-bit digest of the assignment (one byte per unit: OPTIONS indices are small): memo keys of 16 bytes,
        not 8 bytes per unit (15,000 units)."""
        return hashlib.blake2b(assign.astype(np.int8), digest_size=16).digest()

    def score(self, assign: np.ndarray, s: Settings, akey: bytes | None = None) -> float:
        key = (akey or self.key(assign), s)
        got = self.seen.get(key)
        if got is None:
            t = self.ev.times(assign, s)
            if self.bar is not None:
                self.bar.update(1)
            load = self.ev.load_s(assign, s) if t is not None and self.objective == "request" else 0.0
            got = float("inf") if t is None else objective_value(self.objective, t[1], t[2], load)
            self.seen[key] = got
        return got

    def settings_for(self, assign: np.ndarray) -> list[Settings]:
        offloads = (None, OFFLOAD_MIN_TOKENS) if any(OPTIONS[j][1] == "cpu" for j in set(assign.tolist())) else (None,)
        return [(*s, off) for s in LOADER_SETTINGS for off in offloads]

    def fit(self, assign: np.ndarray, akey: bytes) -> bool:
        """Whether some loader setting fits the budgets: the least staging does (no evaluation needed to know)."""
        got = self.fits.get(akey)
        if got is None:
            got = self.fits[akey] = self.ev.memory(assign, LEAST_MEMORY) is not None
        return got

    def best_settings(self, assign: np.ndarray) -> tuple[Settings | None, float]:
        best, best_t = None, float("inf")
        akey = self.key(assign)
        if not self.fit(assign, akey):
            return best, best_t
        for s in self.settings_for(assign):
            t = self.score(assign, s, akey)
            if t < best_t:
                best, best_t = s, t
        return best, best_t

    def moves(self, assign: np.ndarray) -> list[tuple[np.ndarray, int]]:
        """(units, option): move k of a group's units that share an option to another option, k in {1 (or 1/64 of
        a large group), a quarter, half, all}, evenly spread; in groups ordered by use also the k most and the k least
        used."""
        out = []
        for g, ordered in zip(self.groups, self.ordered):
            for a in sorted(set(assign[g].tolist())):
                members = g[assign[g] == a]
                m = len(members)
                picks, seen = [], set()
                for k in sorted({max(1, m // 64), -(-m // 4), -(-m // 2), m}):
                    ends = (members[:k], members[m - k:]) if ordered else ()
                    for pick in (members[np.linspace(0, m - 1, k).round().astype(int)], *ends):
                        key = tuple(pick.tolist())
                        if key not in seen:
                            seen.add(key)
                            picks.append(pick)
                out += [(pick, b) for b in self.options if b != a for pick in picks]
        return out

    def swaps(self, assign: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(units, options): two units in different options exchange them. Every such pair on a small model
        (SWAP_ALL units or fewer); on a larger one, neighbours within a group and the middle units of every two
        (group, option) classes."""
        n = len(assign)
        if n <= SWAP_ALL:
            pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if assign[i] != assign[j]]
        else:
            pairs, mids = [], []
            for g in self.groups:
                pairs += [(int(g[k]), int(g[k + 1])) for k in range(len(g) - 1) if assign[g[k]] != assign[g[k + 1]]]
                for a in sorted(set(assign[g].tolist())):
                    members = g[assign[g] == a]
                    mids.append(int(members[len(members) // 2]))
            pairs += [(i, j) for i, j in itertools.combinations(mids, 2) if assign[i] != assign[j]]
        return [(np.array([i, j]), np.array([assign[j], assign[i]])) for i, j in pairs]

    def _try(self, assign: np.ndarray, units: np.ndarray, to, s: Settings, t: float):
        """The assignment with `units` moved to `to` and its settings and score, where that improves on `t`."""
        trial = assign.copy()
        trial[units] = to
        akey = self.key(trial)
        if not self.fit(trial, akey):
            return None
        if self.no_better(trial, s, t):
            return None
        t2, s2 = self.score(trial, s, akey), s
        if t2 == float("inf") or (t2 >= t * IMPROVES and len(assign) <= SWAP_ALL):
            s2, t2 = self.best_settings(trial)  # over budget with these settings, or a small model: every setting
        return (trial, s2, t2) if t2 < t * IMPROVES else None

    def no_better(self, assign: np.ndarray, s: Settings, t: float) -> bool:
        """The floor proves every loader setting of `assign` that `_try` scores no better than `t` (the total's
        objectives only; the load counted with the fewest pinned slots, the least it can be)."""
        if self.floor is None or self.objective == "token":
            return False
        offloads = {s[3], None, OFFLOAD_MIN_TOKENS} if len(assign) <= SWAP_ALL else {s[3]}  # every setting tried
        lb = min(self.floor.total_s(assign, off) for off in offloads)
        if self.objective == "request":
            lb += self.ev.load_s(assign, LEAST_MEMORY)
        return lb >= t * IMPROVES

    def descend(self, assign: np.ndarray, s: Settings, t: float) -> tuple[np.ndarray, Settings, float]:
        """First-improvement moves, scanned cyclically from the last improving one; where none improves, swaps of two
        units' options, then the loader settings; until a whole scan of all three finds no improvement (or a safety
        net fires)."""
        pos = 0
        while not self.out_of_budget():
            moves = self.moves(assign)
            got = None
            for r in range(len(moves)):
                if self.out_of_budget():
                    return assign, s, t
                got = self._try(assign, *moves[(pos + r) % len(moves)], s, t)
                if got:
                    pos = (pos + r) % len(moves)
                    break
            if got:
                assign, s, t = got
                continue
            swapped = False
            while not self.out_of_budget():  # swaps until none improves, then the moves again
                got = next(filter(None, (self._try(assign, units, to, s, t) for units, to in self.swaps(assign))),
                           None)
                if not got:
                    break
                (assign, s, t), swapped = got, True
            if swapped:
                continue
            s2, t2 = self.best_settings(assign)
            if t2 >= t * IMPROVES:
                break
            s, t = s2, t2
        return assign, s, t

    def run(self, starts: list[tuple[np.ndarray, Settings, float]], kicks: int = KICKS, n_starts: int = 3) -> Outcome:
        """Descend from the best `n_starts` distinct starts, then `kicks` seeded kicks of the best (2-4 units to random
        options, and as many times more per 512 units, then descend; ending after FUTILE_KICKS in a row that improve
        nothing). Only the first descent is certain: the others begin while the exploration budget lasts
        (EXPLORE_ITEMS; deterministic). Returns the best plan seen: a local optimum of the neighbourhood (`moves`)
        and the loader settings, converged unless a safety net fired."""
        order = sorted(range(len(starts)), key=lambda i: (starts[i][2], i))
        distinct, seen = [], set()
        for i in order:
            key = (tuple(starts[i][0].tolist()), starts[i][1])
            if key not in seen:
                seen.add(key)
                distinct.append(starts[i])
        best = distinct[0]
        for k, (a, s, t) in enumerate(distinct[:n_starts]):
            if k and self.explored():
                break
            got = self.descend(a, s, t)
            if got[2] < best[2] * IMPROVES:
                best = got
        rng = np.random.default_rng(0)
        n = len(best[0])
        futile = 0
        for _ in range(kicks):
            if self.stopped or futile >= FUTILE_KICKS or self.explored():
                break
            futile += 1
            a = best[0].copy()
            for i in rng.choice(n, size=min(n, int(rng.integers(2, 5)) * max(1, n // 512)), replace=False):
                a[i] = self.options[int(rng.integers(len(self.options)))]
            s, t = self.best_settings(a)
            if s is None:
                continue
            got = self.descend(a, s, t)
            if got[2] < best[2] * IMPROVES:
                best, futile = got, 0
        return Outcome(best[0], best[1], best[2], not self.stopped, self.stopped or "converged")


def exact_size(n_units: int, n_options: int) -> int:
    return n_options ** n_units * len(LOADER_SETTINGS) * 2


def exact(search: Search) -> Outcome | None:
    """Every assignment x loader setting that fits the budgets (tiny instances): a proven optimum of the plan space."""
    best, best_s, best_t = None, None, float("inf")
    n = len(search.ev.model.units)
    for combo in itertools.product(search.options, repeat=n):
        a = np.array(combo, dtype=np.int64)
        s, t = search.best_settings(a)
        if t < best_t:
            best, best_s, best_t = a, s, t
    return None if best is None else Outcome(best, best_s, best_t, True, "exhaustive")
