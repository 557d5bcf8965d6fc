"""The fastest placement llama.cpp can run at the budgets (`plan --engine llamacpp`)."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.costs.memory import PlanError
from sim.engines.common import OFFLOAD_MIN_TOKENS, largest_feasible
from sim.engines.llamacpp.export import LLAMACPP_FAMILIES
from sim.engines.llamacpp.placement import llamacpp
from sim.engines.llamacpp.layout import llamacpp_ngl
from sim.engines.ranking import ranked_score
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload


def best_llamacpp(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                   objective: str = "token") -> Plan:
    """The fastest placement llama.cpp can run: `-ngl N` (the last N layers on the GPU, the output counted first)
    and, for an MoE, every layer on the GPU but the routed experts of the first N blocks (`--n-cpu-moe N`, as its users
    offload one); the CPU's weights mapped (its default) or pinned (--load-mode none, where the pinned budget holds
    them; faster when a step it ranks by multiplies them on the GPU). In each family the feasible values form a
    prefix of how much is on the GPU (more needs more VRAM): the largest is found by bisection, the values scanned
    coarsely, then around the family's best with a halving step, then its neighbours. Ties go to fewer bytes
    computed on the CPU, then to the mapped file. llama.cpp's own --fit placement is a candidate too (its partial
    layers keep the experts of blocks other than the first ones on the CPU)."""
    if model.family not in LLAMACPP_FAMILIES:
        raise PlanError(f"llama.cpp cannot run a {model.family!r} model; plan for accelerate or offloadsim instead")
    n = model.n_blocks
    search = _Placements(model, machine, w, budgets, objective)
    if search.plan_at(0, 0) is None:  # why even -ngl 0 does not fit (its compute buffer, or the RAM), in one sentence
        raise PlanError("llama.cpp cannot run this model at these budgets even with no layer on the GPU: "
                        f"{search.why[0, 0, True]}")
    # pinned weights change only the copies of a step ggml offloads (OFFLOAD_MIN_TOKENS or more tokens): the prompt
    # when the request's total counts, the decode steps when they carry that many sequences
    scored = w.batch * (w.prompt_tokens if objective != "token" else 1)
    modes = (True, False) if scored >= OFFLOAD_MIN_TOKENS else (True,)
    # a family: the placement of its value g (how much is on the GPU), and g's largest value
    families = [(lambda g: (g, 0), n + 1)]
    if model.is_moe:
        families.append((lambda g: (n + 1, n - g), n))
    for key_of, top in families:
        _scan(search, key_of, top, modes)
    return _choose(search)


class _Placements:
    """llama.cpp's placements by (ngl, ncmoe, mapped), each made once (None with the reason when it does not fit),
    and their ranking times with the bytes they compute on the CPU."""

    def __init__(self, model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets, objective: str):
        self.model, self.machine, self.w, self.budgets, self.objective = model, machine, w, budgets, objective
        self.made: dict[tuple[int, int, bool], Plan | None] = {}
        self.why: dict[tuple[int, int, bool], str] = {}  # the reason a placement does not fit
        self.times: dict[tuple[int, int, bool], tuple[float, int]] = {}  # -> (time, CPU bytes)

    def plan_at(self, ngl: int, ncmoe: int, mapped: bool = True) -> Plan | None:
        key = (ngl, ncmoe, mapped)
        if key not in self.made:
            try:
                self.made[key] = llamacpp_ngl(self.model, self.machine, self.w, self.budgets, ngl, ncmoe, mapped)
            except PlanError as exc:
                self.made[key], self.why[key] = None, str(exc)
        return self.made[key]

    def timed(self, key: tuple[int, int, bool]) -> tuple[float, int]:
        if key not in self.times:  # a placement both families reach is timed once
            plan = self.plan_at(*key)
            t = ranked_score(self.model, self.machine, plan, self.w, self.budgets, self.objective)
            self.times[key] = (t, sum(self.model.unit(p.unit).nbytes for p in plan.placements if p.compute == "cpu"))
        return self.times[key]


def _scan(search: _Placements, key_of, top: int, modes: tuple[bool, ...]) -> None:
    """Time a family's placements: its feasible prefix found by bisection, scanned coarsely, then around its best
    with a halving step, then the best's neighbours."""
    if search.plan_at(*key_of(0)) is None:
        return
    lo = largest_feasible(top, lambda g: search.plan_at(*key_of(g)) is not None)
    mine: dict[int, tuple[float, int]] = {}

    def score(g: int) -> None:
        for mapped in modes:
            key = (*key_of(g), mapped)
            if not 0 <= g <= lo or search.plan_at(*key) is None:
                continue
            t = search.timed(key)
            mine[g] = min(mine.get(g, t), t)

    def best() -> int:
        return min(mine, key=lambda g: mine[g])
    step = max(1, lo // 8)
    for g in [*range(0, lo + 1, step), lo]:
        score(g)
    while step > 1:  # halve the step around the best
        step = (step + 1) // 2
        b = best()
        score(b - step), score(b + step)
    b = best()
    score(b - 1), score(b + 1)


def _choose(search: _Placements) -> Plan:
    """The fastest placement timed (ties: fewer CPU bytes, then the mapped file), or llama.cpp's own --fit placement
    where it is faster (its partial layers are in neither family)."""
    times = search.times
    fastest = min(t for t, _ in times.values())
    try:  # llama.cpp's own placement (--fit, sim/engines/llamacpp/fit.py)
        fit = llamacpp(search.model, search.machine, search.w, search.budgets)
        if ranked_score(search.model, search.machine, fit, search.w, search.budgets, search.objective) \
                < fastest * (1 - 1e-9):
            return fit.model_copy(update={"policy": "llamacpp-planned (the placement of its own --fit)"})
    except PlanError:
        pass
    ties = [k for k in times if times[k][0] <= fastest * (1 + 1e-9)]  # equal up to the sums' rounding
    ngl, ncmoe, mapped = min(ties, key=lambda k: (times[k][1], not k[2]))
    return search.plan_at(ngl, ncmoe, mapped).model_copy(update={
        "policy": f"llamacpp-planned (-ngl {ngl}{f' --n-cpu-moe {ncmoe}' if ncmoe else ''}"
                  f"{'' if mapped else ' --load-mode none'})"})
