"""A lower bound on the simulated total time of every plan (proof in lab/journal/planner.md, "The lower bound").

For each unit and option the work it puts on each serial resource (the compute chain, the copy engine, the disk
reader, the unpacker) is bounded from below over the request's real expert draws, with the page cache assumed to
hit on every read after the first and no memory spent on staging. A CPU-placed unit may be computed on the GPU in
large steps (`gpu_offload_min_tokens`): one threshold per plan, so either no step, only the prefill, or every step
is offloaded. The bound is the least, over those three modes, of the integer program's dual bound.
"""
from __future__ import annotations

import numpy as np

from planner.evaluator import Evaluator
from planner.milp import MilpResult, Room, Solver, solve
from planner.candidates import unit_groups
from planner.choices import OPTIONS
from planner.options import RESOURCES, OptionCosts, add_kv_cache, per_size
from sim.costs.tiers import TIER_ROWS
from sim.costs.transfer import copy_time_s
from sim.costs.memory import activation_bytes

MODES = ("none", "prefill", "all")
ROUND = 1e-3   # work rounded down to this relative grid before grouping: still a bound, far fewer groups
SKIP_MARGIN = 1e-4   # a relaxation this much above the least bound (relative; and 1e-6 s) skips its program


def _phase_sums(ev: Evaluator) -> dict[str, np.ndarray]:
    """Per unit and phase (prefill step 0, decode steps 1..): uses, GPU and CPU compute seconds."""
    n, out = len(ev.nb), {}
    for phase, keep in (("pre", ev.step == 0), ("dec", ev.step > 0)):
        u = ev.unit[keep]
        out[f"uses_{phase}"] = np.bincount(u, minlength=n).astype(float)
        out[f"gpu_{phase}"] = np.bincount(u, weights=ev.comp[0][keep], minlength=n)
        out[f"cpu_{phase}"] = np.bincount(u, weights=ev.comp[1][keep], minlength=n)
    return out


def bound_costs(ev: Evaluator, mode: str, ph: dict[str, np.ndarray]) -> OptionCosts:
    """Each option's least work per resource over the request, with CPU units offloaded to the GPU in `mode`;
    `ph`: `_phase_sums(ev)`."""
    m, w, codec = ev.machine, ev.w, ev.codec
    nb = ev.nb
    n, k = len(nb), len(OPTIONS)
    st = m.storage
    ratio = codec.ratio if codec else 1.0
    copy_pin = per_size(nb, copy_time_s, m, True)
    copy_page = per_size(nb, copy_time_s, m, False)
    copy_any = np.minimum(copy_pin, copy_page)  # staged tiers copy from pinned buffers or, without staging, pageable
    work = {r: np.zeros((n, k)) for r in RESOURCES}
    vram, pinned, ram, disk = (np.zeros((n, k)) for _ in range(4))
    allowed = np.ones((n, k), dtype=bool)
    first_cold = 0.0 if w.warm else 1.0
    for j, (tier, dev) in enumerate(OPTIONS):
        row = TIER_ROWS[tier]
        copy = {"pageable": copy_page, "pinned": copy_pin, "staging": copy_any}.get(row.copy_from)
        reads = np.zeros(n)
        for phase in ("pre", "dec"):
            uses = ph[f"uses_{phase}"]
            offloaded = dev == "cpu" and (mode == "all" or (mode == "prefill" and phase == "pre"))
            on_gpu = dev == "gpu" or offloaded
            work["compute"][:, j] += ph[f"gpu_{phase}"] if on_gpu else ph[f"cpu_{phase}"]
            if on_gpu and copy is not None:
                work["copy"][:, j] += uses * copy
            if row.reads_storage and not offloaded:
                reads += uses
            if row.unpacks and codec is not None:
                work["unpack"][:, j] += uses * nb / codec.unpack_bytes_per_s
        stored = nb * (ratio if row.compressed and row.reads_storage else 1.0)
        cold = np.minimum(reads, first_cold)
        work["read"][:, j] = cold * (st.request_latency_s + stored / st.cold_read_bytes_per_s) + \
            (reads - cold) * (st.request_latency_s + stored / max(st.cache_read_bytes_per_s, st.cold_read_bytes_per_s))
        if row.compressed and codec is None:
            allowed[:, j] = False
        vram[:, j] = nb if row.resident else 0
        pinned[:, j] = nb if row.pinned_home else 0
        ram[:, j] = row.stored(nb, ratio) if row.home == "pageable" else 0
        disk[:, j] = stored if row.reads_storage else 0
    for r in RESOURCES:  # round down on a relative grid: identical units group, the bound stays a bound
        x = work[r]
        pos = x > 0
        x[pos] = np.exp(np.floor(np.log(x[pos]) / np.log1p(ROUND)) * np.log1p(ROUND))
    add_kv_cache(ev.model, w, vram, ram)  # a CPU layer's copy to the GPU in an offloaded step left out: still a bound
    return OptionCosts(work, vram, pinned, ram, disk, allowed, nb)


def lower_bound(ev: Evaluator, options: list[tuple[str, str]], time_limit_s: float = 5.0) -> float:
    """The least total time any plan over `options` can reach at the evaluator's budgets (NaN if none fits).
    A mode's linear relaxation is below its integer program's dual bound, so a mode whose relaxation is above the
    least bound found (with a margin for the solver's tolerances) cannot lower it: its integer program is skipped."""
    b = ev.budgets
    free = b.vram_bytes - activation_bytes(ev.model, ev.w)  # the KV cache is in the options' costs
    modes = MODES if any(d == "cpu" for _, d in options) else ("none",)
    ph = _phase_sums(ev)
    programs = []
    for mode in modes:
        costs = bound_costs(ev, mode, ph)
        costs.allowed[:, [j for j, o in enumerate(OPTIONS) if o not in options]] = False
        programs.append((costs, unit_groups(costs)))

    def bound(costs: OptionCosts, gs: list[np.ndarray], integral: bool) -> MilpResult:
        return solve(costs, gs, Room(free, b.pinned_bytes, b.ram_bytes, free, False),
                     Solver(time_limit_s, integral, rel_gap=0.01))

    relaxed = [bound(costs, gs, False) for costs, gs in programs]
    best = float("nan")
    for i in sorted(range(len(programs)), key=lambda i: relaxed[i].bound_s):
        if not relaxed[i].feasible or relaxed[i].bound_s > best * (1 + SKIP_MARGIN) + 1e-6:
            continue  # infeasible, or above the least bound (false while best is NaN)
        costs, gs = programs[i]
        res = bound(costs, gs, True) if len(gs) <= 400 else relaxed[i]
        if res.feasible and not res.bound_s >= best:
            best = res.bound_s
    return best


class PlanFloor:
    """A lower bound on one plan's simulated total (the same argument as `lower_bound`, for a given assignment and
    offload threshold: the most work of any serial resource), a few microseconds each: the search skips a move whose
    floor is already no better than the incumbent."""

    def __init__(self, ev: Evaluator):
        self.ev, self.ph, self.work = ev, _phase_sums(ev), {}
        self.rows = np.arange(len(ev.nb))

    def total_s(self, assign: np.ndarray, offload: int | None) -> float:
        tokens = self.ev.tokens
        mode = "none" if not offload or tokens[0] < offload else ("all" if len(tokens) > 1 and tokens[1] >= offload
                                                                   else "prefill")
        if mode not in self.work:  # a CPU embedding is never offloaded: each unit's least work of its mode and none
            least = [np.stack([bound_costs(self.ev, m, self.ph).work[r] for r in RESOURCES]) for m in (mode, "none")]
            self.work[mode] = np.minimum(*least)
        return float(self.work[mode][:, self.rows, assign].sum(axis=1).max())
