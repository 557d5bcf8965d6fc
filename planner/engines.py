"""Plans for the engine the user will run (`plan --engine`): only what that engine can execute, timed with that
engine's model (its pipeline and its measured host costs, machine.peers), and every engine side by side.

- offloadsim: the full planner (planner/core.py).
- accelerate: any device_map of whole units over the GPU, CPU RAM and disk. Accelerate copies an offloaded module
  in before each forward (blocking, pageable, no prefetch), so a unit's cost off the GPU does not depend on the
  others: the best map keeps the units that cost most per byte off the GPU, a knapsack solved greedily by that
  density (exact up to the last unit that does not fit), and it is never worse than Accelerate's own map.
- llamacpp: every `-ngl` value (the last N blocks on the GPU, the rest computed on the CPU) and, for an MoE, every
  `--n-cpu-moe` value with all layers on the GPU; its CPU weights mapped or pinned (--load-mode none); the fastest
  that fits.
- airllm: nothing to choose (every layer re-read every token); its time, or why it cannot run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hwmodels.specs import MachineSpec
from hwmodels.units import unknown_name
from sim.costs.equations import copy_time_s
from planner.export import LLAMACPP_FAMILIES
from sim.costs.memory import PlanError, activation_bytes, kv_cache_bytes
from sim.plan import Budgets, Plan, Workload
from sim.engines.llamacpp.layout import OFFLOAD_MIN_TOKENS, llamacpp_ngl
from sim.engines.placements import POLICIES
from sim.engines.common import largest_feasible
from sim.engines.placements import accelerate_map as run_map
from sim.model.shapes import ModelShape, param_modules
from sim.run.simulate import fast_simulate
from planner.core import plan_with_report

ENGINES = ("offloadsim", "accelerate", "llamacpp", "airllm")


@dataclass
class EnginePlan:
    engine: str
    plan: Plan | None
    summary: dict = field(default_factory=dict)
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def time_per_token_s(self) -> float | None:
        return self.summary.get("time_per_token_s")


def _simulate(model, machine, plan, w, budgets) -> dict:
    return fast_simulate(model, machine, plan, w, budgets)


RANK_TOKENS = 4  # candidates are ranked on the prefill and 3 decode steps; the chosen plan is timed on the workload


def _ranking(w: Workload) -> Workload:
    return w.model_copy(update={"new_tokens": min(w.new_tokens, RANK_TOKENS)})


def _score(s: dict, w: Workload, objective: str) -> float:
    """The objective from a ranking run: time per token, or the request's total (first token + the decode steps)."""
    return s["time_per_token_s"] if objective == "token" else s["ttft_s"] + (w.new_tokens - 1) * s["time_per_token_s"]


def _best(model, machine, w, budgets, plans: list[Plan], objective: str) -> Plan | None:
    best, best_t = None, float("inf")
    for p in plans:
        t = _score(_simulate(model, machine, p, _ranking(w), budgets), w, objective)
        if best is None or t < best_t * (1 - 1e-12):
            best, best_t = p, t
    return best


def best_accelerate_map(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                        objective: str = "token") -> Plan:
    """The fastest device_map Accelerate can run at these budgets (greedy by seconds saved per byte). A head tied to
    the embedding goes where the embedding goes (transformers shares the one matrix; Accelerate places them
    together): the pair is one item of the embedding's bytes, costing both units' copies off the GPU."""
    peer = machine.peers["accelerate"]
    tied = next((u for u in model.units if u.kind == "lm_head" and u.tied_nbytes), None)
    emb = next((u for u in model.units if u.kind == "embedding"), None) if tied else None
    tied = tied if emb is not None else None

    def off_s(u) -> float:  # seconds per token a unit costs off the GPU
        own = copy_time_s(u.nbytes, machine, pinned=False) + peer.load_module_s * param_modules(u.kind, model.family)
        return own + (off_s(tied) if u is emb else 0.0)

    def size(u) -> int:  # bytes the unit adds where it is placed (with its tied head: the head's own, once)
        return u.nbytes + (tied.nbytes - tied.tied_nbytes if u is emb else 0)
    order = sorted((u for u in model.units if u is not tied), key=lambda u: (-off_s(u) / max(size(u), 1), u.name))

    def tiers_keeping(keep: int) -> dict[str, str]:  # the densest `keep` units on the GPU, then RAM, then disk
        tiers, ram_left = {}, budgets.ram_bytes
        for k, u in enumerate(order):
            if k < keep:
                tiers[u.name] = "vram"
            elif size(u) <= ram_left:
                tiers[u.name], ram_left = "ram_pageable", ram_left - size(u)
            else:
                tiers[u.name] = "disk_raw"
        if tied is not None:
            tiers[tied.name] = tiers[emb.name]
        return tiers
    # VRAM for the densest `keep` units: their bytes + one slot for the largest offloaded unit + KV + activations
    sizes = np.array([size(u) for u in order], dtype=np.float64)
    resident = np.concatenate([[0.0], np.cumsum(sizes)])
    slot = np.concatenate([np.maximum.accumulate(sizes[::-1])[::-1], [0.0]])
    fits = resident + slot + kv_cache_bytes(model, w) + activation_bytes(model, w) <= budgets.vram_bytes
    cands = []
    for keep in np.flatnonzero(fits[1:])[::-1][:3] + 1:  # fewer units on the GPU only adds copies: the most that
        try:                                              # fit is the best of this order (a few in case of rounding)
            cands.append(run_map(model, machine, w, budgets, tiers_keeping(int(keep)), "accelerate-planned"))
            break
        except PlanError:
            continue
    for extra in (lambda: run_map(model, machine, w, budgets, tiers_keeping(0), "accelerate-planned"),  # on the CPU
                  lambda: POLICIES["accelerate"](model, machine, w, budgets)):
        try:
            cands.append(extra())
        except PlanError:
            pass
    if not cands:
        raise PlanError("Accelerate cannot run this model at these budgets (an offloaded module must fit on the GPU "
                        "beside the resident ones); raise --vram")
    return _best(model, machine, w, budgets, cands, objective)


def _llamacpp(model, machine, w, budgets, objective: str = "token") -> Plan:
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
                    t = _score(_simulate(model, machine, plan, _ranking(w), budgets), w, objective)
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
        fit = POLICIES["llamacpp"](model, machine, w, budgets)
        if _score(_simulate(model, machine, fit, _ranking(w), budgets), w, objective) < fastest * (1 - 1e-9):
            return fit.model_copy(update={"policy": "llamacpp-planned (the placement of its own --fit)"})
    except PlanError:
        pass
    ties = [k for k in times if times[k][0] <= fastest * (1 + 1e-9)]  # equal up to the sums' rounding
    ngl, ncmoe, mapped = min(ties, key=lambda k: (times[k][1], not k[2]))
    return plan_at(ngl, ncmoe, mapped).model_copy(update={
        "policy": f"llamacpp-planned (-ngl {ngl}{f' --n-cpu-moe {ncmoe}' if ncmoe else ''}"
                  f"{'' if mapped else ' --load-mode none'})"})


def plan_for_engine(engine: str, model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                    seeds: dict[str, Plan] | None = None, **planner_kw) -> EnginePlan:
    """The best plan `engine` can execute and its predicted times; `plan` None with the reason when none fits.
    offloadsim: the planner, never worse than `seeds` (e.g. the peers' planned placements run on its engine)."""
    if engine not in ENGINES:
        raise unknown_name("engine", engine, list(ENGINES))
    if engine == "offloadsim":
        rep = plan_with_report(model, machine, w, budgets, confirm=False, seeds=seeds, **planner_kw)
        if not rep.plan.feasible:
            return EnginePlan(engine, None, reason=rep.plan.reason)
        return EnginePlan(engine, rep.plan, _simulate(model, machine, rep.plan, w, budgets))
    objective = planner_kw.get("objective", "token")
    try:
        if engine == "airllm":
            plan = POLICIES["airllm"](model, machine, w, budgets)
        else:
            plan = {"accelerate": best_accelerate_map, "llamacpp": _llamacpp}[engine](model, machine, w, budgets,
                                                                                    objective)
    except PlanError as exc:
        return EnginePlan(engine, None, reason=str(exc))
    spec = machine.peers[engine]
    notes = unmeasured_notes(engine, machine)
    if engine == "llamacpp" and any(p.compute == "gpu" for p in plan.placements):
        notes.append(f"priced as a llama.cpp build {'with' if spec.flash_attention else 'without'} its CUDA "
                     "flash-attention kernels (llama.cpp's default has them); for the other, set flash_attention = "
                     f"{str(not spec.flash_attention).lower()} under [{machine.name}.peers.llamacpp]")
    return EnginePlan(engine, plan, _simulate(model, machine, plan, w, budgets), notes=notes)


def unmeasured_notes(engine: str, machine: MachineSpec) -> list[str]:
    """A line saying that a peer engine's host costs are not measured on this machine (none where they are)."""
    spec = machine.peers.get(engine)
    if spec is None or spec.source.startswith(("measured", "[M]")):
        return []
    return [f"{engine}'s host costs are not measured for {machine.name}: the time is its pipeline alone ({spec.source})"
            + ("; measure them with offloadsim calibrate-peer MODEL.gguf --bench BENCH.json --profile MACHINE (the "
               "--machine given here), BENCH.json from llama-bench -m MODEL.gguf -ngl 0 -n 32 -o json on this machine"
               if engine == "llamacpp" else "")]


def peer_seeds(peers: dict[str, EnginePlan]) -> dict[str, Plan]:
    """The peers' planned placements as offloadsim plans: the planner must not be worse than any of them."""
    return {f"{e}-planned": r.plan.model_copy(update={"engine": "offloadsim", "policy": "planner"})
            for e, r in peers.items() if r.plan is not None}


def peer_engine_plans(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets, objective: str = "token",
                      known: dict[str, EnginePlan] | None = None) -> dict[str, EnginePlan]:
    """Every peer engine's best plan for the objective, reusing those in `known`."""
    known = known or {}
    return {e: known.get(e) or plan_for_engine(e, model, machine, w, budgets, objective=objective)
            for e in ENGINES if e != "offloadsim"}


def compare_engines(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                    known: dict[str, EnginePlan] | None = None, **planner_kw) -> dict[str, EnginePlan]:
    """Every engine's best plan at these budgets, reusing those in `known`; offloadsim's is planned never worse than
    a peer's placement."""
    known = known or {}
    peers = peer_engine_plans(model, machine, w, budgets, planner_kw.get("objective", "token"), known)
    ours = known.get("offloadsim") or plan_for_engine("offloadsim", model, machine, w, budgets, seeds=peer_seeds(peers),
                                                      **planner_kw)
    return {"offloadsim": ours, **peers}
