"""Engine behaviours as plans (../shared/reference/peer-engines.md), through one registry.

Each policy is a pure function (model, machine, workload, budgets) -> Plan that imitates its engine's placement
and runtime: what is resident, where it is computed, how far ahead it loads and whether copies overlap compute.
"""
from __future__ import annotations

from typing import Callable

from hwmodels.specs import MachineSpec
from hwmodels.units import unknown_name
from sim.memory import PlanError, check_plan
from sim.plan import Budgets, Placement, Plan, Workload
from sim.schedule import AIRLLM_PIN_LIMIT_BYTES
from sim.shapes import ModelShape

OFFLOAD_MIN_TOKENS = 32  # llama.cpp copies CPU-placed weights to the GPU for batches of >= 32 tokens
                        # (ggml-cuda.cu: ggml_backend_cuda_device_offload_op, min_batch_size = 32)
Policy = Callable[[ModelShape, MachineSpec, Workload, Budgets], Plan]
POLICIES: dict[str, Policy] = {}


def register(name: str):
    def deco(fn: Policy) -> Policy:
        POLICIES[name] = fn
        return fn
    return deco


def get_policy(name: str) -> Policy:
    if name not in POLICIES:
        raise unknown_name("policy", name, list(POLICIES))
    return POLICIES[name]


def make_plan(model: ModelShape, machine: MachineSpec, policy: str, tiers: dict[str, str],
              compute: dict[str, str] | None = None, **kw) -> Plan:
    compute = compute or {}
    placements = tuple(Placement(unit=u.name, tier=tiers[u.name], compute=compute.get(u.name, "gpu")) for u in model.units)
    return Plan(model=model.name, machine=machine.name, policy=policy, placements=placements, **kw)


def fit_slots(model, plan: Plan, w, budgets, most: int) -> Plan:
    """The plan with the most VRAM staging slots (up to `most`) that fits; the 1-slot plan's error otherwise."""
    for slots in range(most, 0, -1):
        cand = plan.model_copy(update={"vram_slots": slots, "prefetch_depth": min(plan.prefetch_depth, slots)})
        try:
            check_plan(model, cand, w, budgets)
            return cand
        except PlanError as exc:
            err = exc
    raise err


def largest_feasible(hi: int, feasible: Callable[[int], bool]) -> int:
    """The largest k in 0..hi with feasible(k), by bisection, for a feasible(0) whose true values form a prefix."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if feasible(mid) else (lo, mid - 1)
    return lo


def _host_tiers(model: ModelShape, names: list[str], budgets: Budgets, reserve_pinned: int, pinned_ok: bool) -> dict[str, str]:
    """RAM tiers in model order while they fit (pinned first if allowed), then the disk."""
    tiers = {}
    ram_left = budgets.ram_bytes - reserve_pinned
    pin_left = budgets.pinned_bytes - reserve_pinned
    for n in names:
        nb = model.unit(n).nbytes
        if pinned_ok and nb <= pin_left and nb <= ram_left:
            tiers[n], pin_left, ram_left = "ram_pinned", pin_left - nb, ram_left - nb
        elif nb <= ram_left:
            tiers[n], ram_left = "ram_pageable", ram_left - nb
        else:
            tiers[n] = "disk_raw"
    return tiers


@register("airllm")
def airllm(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """Every unit re-read from its per-layer file each token, one read ahead on a worker thread; blocking copy, no
    copy/compute overlap; layers up to 2 GiB pinned. A model whose head is tied to its embedding keeps that one
    matrix resident on the GPU and streams the rest (airllm 4.0 `_install_streaming_hooks`: the embedding is loaded
    once and the head re-tied to it; only the decoders and the final norm get streaming hooks)."""
    resident = {"embedding", "lm_head"} if model.tied_head else set()
    tiers = {u.name: "vram" if u.kind in resident else "disk_raw" for u in model.units}
    biggest = max(u.nbytes for u in model.units if u.kind not in resident)
    plan = make_plan(model, machine, "airllm", tiers, prefetch_depth=1,
                     overlap_copy=False, vram_slots=1, pinned_slots=2, pinned_staging=biggest <= AIRLLM_PIN_LIMIT_BYTES,
                     engine="airllm")
    check_plan(model, plan, w, budgets)
    return plan


def _blocks(model: ModelShape) -> list[list[str]]:
    """Units grouped as engines place them: a whole decoder block (attention with its experts) at a time."""
    groups: list[list[str]] = []
    for u in model.units:
        if groups and model.unit(groups[-1][0]).block == u.block:
            groups[-1].append(u.name)
        else:
            groups.append([u.name])
    return groups


@register("accelerate")
def accelerate(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """What transformers' `device_map="auto"` does with max_memory = the budgets (Accelerate's
    infer_auto_device_map): one greedy pass in module order filling the GPU, then CPU RAM, each less the largest
    block still to place as a reserve, then disk, never going back; KV cache and activations are not counted.
    Offloaded blocks are copied in before each forward (blocking, pageable, no prefetch). When no block lands on the
    GPU the model runs on the CPU (measured on the H200: docs/peers.md)."""
    return accelerate_map(model, machine, w, budgets, accelerate_tiers(model, budgets), "accelerate")


def accelerate_tiers(model: ModelShape, budgets: Budgets) -> dict[str, str]:
    """Where infer_auto_device_map puts each unit given max_memory = (VRAM budget, RAM budget): blocks in module
    order on the GPU, then the CPU, then disk, never going back; a block fits a device when what it holds plus the
    block stays within its budget less the largest block still to place (accelerate/utils/modeling.py: the GPU and
    the CPU are both 'main devices' and keep that reserve, max_layer_size, recomputed as blocks are placed). A head
    tied to the embedding is placed with it, its matrix counted once, and is no block of its own to reserve for
    (get_module_size_with_ties: the tied module goes where the embedding goes; measured, call R: `lm_head` on the
    embedding's device at every budget, and as many layers beside them as that one matrix leaves room for)."""
    groups = _blocks(model)
    if model.tied_head:
        head = [g for g in groups if any(model.unit(n).kind == "lm_head" for n in g)]
        emb = next((g for g in groups if any(model.unit(n).kind == "embedding" for n in g)), None)
        if head and emb is not None and head[0] is not emb:
            emb.extend(head[0])
            groups.remove(head[0])
    size = [sum(model.unit(n).nbytes - model.unit(n).tied_nbytes for n in g) for g in groups]
    # the reserve is the largest module Accelerate will not split: a decoder block whole, but of the head unit only
    # the head's matrix (the final norm is a module of its own; call Q's CPU took one more layer on a 2 kB margin)
    held = [model.unit(g[-1]).largest_tensor_bytes if model.unit(g[-1]).kind == "lm_head" and len(g) == 1 else size[i]
            for i, g in enumerate(groups)]
    devices = (("vram", budgets.vram_bytes), ("ram_pageable", budgets.ram_bytes), ("disk_raw", None))
    tiers, d, used = {}, 0, 0
    for i, g in enumerate(groups):
        reserve = max(held[i + 1:], default=0)
        while devices[d][1] is not None and used + size[i] > devices[d][1] - reserve:
            d, used = d + 1, 0
        for n in g:
            tiers[n] = devices[d][0]
        used += size[i]
    return tiers


def accelerate_map(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets, tiers: dict[str, str],
                   policy: str) -> Plan:
    """A device_map run by Accelerate: offloaded units copied to the GPU before each forward, or everything computed
    on the CPU when nothing is on the GPU (Accelerate's execution device is then the CPU)."""
    on_cpu = all(t != "vram" for t in tiers.values())
    plan = make_plan(model, machine, policy, tiers, {n: "cpu" for n in tiers} if on_cpu else None, prefetch_depth=0,
                     overlap_copy=False, vram_slots=1, pinned_slots=0, pinned_staging=False, engine="accelerate")
    check_plan(model, plan, w, budgets)
    return plan


@register("llamacpp")
def llamacpp(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """llama.cpp as its --fit (on by default) places a model (sim/llamacpp_fit.py, a port of common/fit.cpp over
    llama.cpp's use of GPU memory, sim/ggml_memory.py). Dense: -ngl N, the output head and the last N-1 blocks on
    the GPU (src/llama-model.cpp: i_gpu_start = n_layer + 1 - N, and the output is layer n_layer), as many as fit;
    the rest computed on the CPU from the memory-mapped model file (llama.cpp's default: pageable page-cache pages,
    or the disk when RAM is short); the token embedding always on the CPU; steps of >= 32 tokens copy CPU weights
    to the GPU. MoE: layers with their routed experts in system memory first, then, where every layer fits so,
    layers made whole from the front. Raises PlanError when even that does not fit the budgets."""
    from sim.llamacpp_fit import fit_placement
    plan, _ = fit_placement(model, machine, w, budgets)
    check_plan(model, plan, w, budgets)
    return plan


def llamacpp_layout(model: ModelShape, machine: MachineSpec, budgets: Budgets, ngl: int, n_cpu_moe: int = 0,
                    mapped: bool = True, cpu_expert_blocks=None) -> Plan:
    """llama.cpp with `-ngl ngl`, its GPU memory not checked (llamacpp_ngl checks it): ngl 1 puts only the output
    head on the GPU, n_blocks + 1 everything but the embedding; `--n-cpu-moe n_cpu_moe` keeps the routed experts of
    the first n_cpu_moe blocks on the CPU whatever -ngl says (the shared experts stay with their block). `mapped`:
    its default, the CPU's weights are the mapped model file (pageable); with --load-mode none (older builds:
    --no-mmap) it reads them into its GPU's host buffer type, pinned (llama-model-loader.cpp: "avoid using a host
    buffer when using mmap"; CUDA_Host), so a prefill that multiplies them on the GPU copies them at the pinned
    speed (calls AD and AE, docs/peers.md). `cpu_expert_blocks`, where given, names the blocks whose routed experts
    stay on the CPU instead of n_cpu_moe's first ones (as --fit's -ot rules do). Raises PlanError when unmapped
    weights outgrow the pinned budget."""
    blocks = set(range(n_cpu_moe) if cpu_expert_blocks is None else cpu_expert_blocks)
    cpu_experts = {u.name for u in model.units if u.kind == "expert" and u.block in blocks}
    groups = [[n for n in g if n not in cpu_experts] for g in _blocks(model)]
    order = [groups[-1], *groups[1:-1][::-1]]  # llama.cpp's layers from the back: the output, then the blocks
    on_gpu = {n for g in order[:ngl] for n in g}
    cpu_names = [u.name for u in model.units if u.name not in on_gpu]
    tiers = _host_tiers(model, cpu_names, budgets, 0, not mapped)  # mmap: nothing pinned
    if not mapped and any(tiers[n] != "ram_pinned" for n in cpu_names):
        pinned = sum(model.unit(n).nbytes for n in cpu_names)
        flag, room = min(("--pinned", budgets.pinned_bytes), ("--ram", budgets.ram_bytes), key=lambda f: f[1])
        raise PlanError(f"llama.cpp --load-mode none pins its CPU weights ({pinned / 2**30:.2f} GiB) but the "
                        f"{flag[2:]} budget is {room / 2**30:.2f} GiB; raise {flag} or keep the mapped file")
    tiers.update({n: "vram" for n in on_gpu})
    return make_plan(model, machine, "llamacpp", tiers, {n: "cpu" for n in cpu_names}, prefetch_depth=0,
                     overlap_copy=False, vram_slots=1, pinned_slots=0, pinned_staging=False,
                     gpu_offload_min_tokens=OFFLOAD_MIN_TOKENS, engine="llamacpp")


def llamacpp_ngl(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets, ngl: int,
                 n_cpu_moe: int = 0, mapped: bool = True, cpu_expert_blocks=None) -> Plan:
    """llamacpp_layout, checked against the budgets for `w` (the GPU's memory as llama.cpp uses it,
    sim/ggml_memory.py); raises PlanError when it does not fit."""
    plan = llamacpp_layout(model, machine, budgets, ngl, n_cpu_moe, mapped, cpu_expert_blocks)
    check_plan(model, plan, w, budgets)
    return plan


@register("stream")
def stream(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """Everything streamed through pinned staging with full copy/compute overlap: weights in pinned RAM while the
    pinned budget lasts, then pageable RAM, then disk; prefetch two units ahead with three VRAM slots when they fit."""
    biggest = max(u.nbytes for u in model.units)
    names = [u.name for u in model.units]
    tiers = _host_tiers(model, names, budgets, 3 * biggest, True)
    plan = make_plan(model, machine, "stream", tiers, prefetch_depth=2, overlap_copy=True, vram_slots=3, pinned_slots=3)
    return fit_slots(model, plan, w, budgets, 3)


@register("resident")
def resident(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """Everything in VRAM (refused with the shortfall when it does not fit)."""
    plan = make_plan(model, machine, "resident", {u.name: "vram" for u in model.units}, prefetch_depth=0, vram_slots=1,
                     pinned_slots=0)
    check_plan(model, plan, w, budgets)
    return plan


def _idealised(name: str) -> Policy:
    def ideal(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
        return POLICIES[name](model, machine, w, budgets).model_copy(update={"policy": f"{name}-ideal",
                                                                            "engine": "offloadsim"})
    ideal.__doc__ = f"{name}'s placement and pipeline run by offloadsim's engine, without {name}'s own host costs."
    return ideal


for _peer in ("airllm", "accelerate", "llamacpp"):  # the idealised policies, named as such
    register(f"{_peer}-ideal")(_idealised(_peer))
