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
    made: dict[tuple[int, int, bool], Plan | None] = {}
    why: dict[tuple[int, int, bool], str] = {}  # the reason a placement does not fit

    def plan_at(ngl: int, ncmoe: int, mapped: bool = True) -> Plan | None:
        if (ngl, ncmoe, mapped) not in made:
            try:
                made[ngl, ncmoe, mapped] = llamacpp_ngl(model, machine, w, budgets, ngl, ncmoe, mapped)
            except PlanError as exc:
                made[ngl, ncmoe, mapped], why[ngl, ncmoe, mapped] = None, str(exc)
        return made[ngl, ncmoe, mapped]
    if plan_at(0, 0) is None:  # why even -ngl 0 does not fit (its compute buffer, or the RAM), in one sentence
        raise PlanError("llama.cpp cannot run this model at these budgets even with no layer on the GPU: "
                        f"{why[0, 0, True]}")
    times: dict[tuple[int, int, bool], tuple[float, int]] = {}  # (ngl, ncmoe, mapped) -> (time, CPU bytes)
    # pinned weights change only the copies of a step ggml offloads (OFFLOAD_MIN_TOKENS or more tokens): the prompt
    # when the request's total counts, the decode steps when they carry that many sequences
    scored = w.batch * (w.prompt_tokens if objective != "token" else 1)
    modes = (True, False) if scored >= OFFLOAD_MIN_TOKENS else (True,)
    # a family: the placement of its value g (how much is on the GPU), and g's largest value
    families = [(lambda g: (g, 0), n + 1)]
    if model.is_moe:
        families.append((lambda g: (n + 1, n - g), n))
    for key_of, top in families:
        if plan_at(*key_of(0)) is None:
            continue
        lo = largest_feasible(top, lambda g: plan_at(*key_of(g)) is not None)
        mine: dict[int, tuple[float, int]] = {}

        def score(g: int) -> None:
            for mapped in modes:
                key = (*key_of(g), mapped)
                if not 0 <= g <= lo or plan_at(*key) is None:
                    continue
                if key not in times:  # a placement both families reach is timed once
                    plan = plan_at(*key)
                    t = ranked_score(model, machine, plan, w, budgets, objective)
                    times[key] = (t, sum(model.unit(p.unit).nbytes for p in plan.placements if p.compute == "cpu"))
                mine[g] = min(mine.get(g, times[key]), times[key])

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
    fastest = min(t for t, _ in times.values())
    try:  # llama.cpp's own placement (--fit, sim/engines/llamacpp/fit.py): its partial layers are in neither family
        fit = llamacpp(model, machine, w, budgets)
        if ranked_score(model, machine, fit, w, budgets, objective) < fastest * (1 - 1e-9):
            return fit.model_copy(update={"policy": "llamacpp-planned (the placement of its own --fit)"})
    except PlanError:
        pass
    ties = [k for k in times if times[k][0] <= fastest * (1 + 1e-9)]  # equal up to the sums' rounding
    ngl, ncmoe, mapped = min(ties, key=lambda k: (times[k][1], not k[2]))
    return plan_at(ngl, ncmoe, mapped).model_copy(update={
        "policy": f"llamacpp-planned (-ngl {ngl}{f' --n-cpu-moe {ncmoe}' if ncmoe else ''}"
                  f"{'' if mapped else ' --load-mode none'})"})
