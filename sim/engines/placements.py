"""Engine behaviours as plans (../shared/reference/peer-engines.md), through one registry.

Each policy is a pure function (model, machine, workload, budgets) -> Plan that imitates its engine's placement
and runtime: what is resident, where it is computed, how far ahead it loads and whether copies overlap compute.
"""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from hwmodels.units import unknown_name
from sim.costs.memory import check_plan
from sim.plan import Budgets, Plan, Workload
from sim.run.schedule import AIRLLM_PIN_LIMIT_BYTES
from sim.model.shapes import ModelShape
from sim.engines.common import Policy, blocks_of, fit_slots, host_tiers, make_plan
from sim.engines.llamacpp.fit import fit_placement

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


@register("accelerate")
def accelerate(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """What transformers' `device_map="auto"` does with max_memory = the budgets (Accelerate's
    infer_auto_device_map): one greedy pass in module order filling the GPU, then CPU RAM, each less the largest
    block still to place as a reserve, then disk, never going back; KV cache and activations are not counted.
    Offloaded blocks are copied in before each forward (blocking, pageable, no prefetch). When no block lands on the
    GPU the model runs on the CPU (measured on the H200: lab/journal/peers.md)."""
    return accelerate_map(model, machine, w, budgets, accelerate_tiers(model, budgets), "accelerate")


def accelerate_tiers(model: ModelShape, budgets: Budgets) -> dict[str, str]:
    """Where infer_auto_device_map puts each unit given max_memory = (VRAM budget, RAM budget): blocks in module
    order on the GPU, then the CPU, then disk, never going back; a block fits a device when what it holds plus the
    block stays within its budget less the largest block still to place (accelerate/utils/modeling.py: the GPU and
    the CPU are both 'main devices' and keep that reserve, max_layer_size, recomputed as blocks are placed). A head
    tied to the embedding is placed with it, its matrix counted once, and is no block of its own to reserve for
    (get_module_size_with_ties: the tied module goes where the embedding goes; measured, call R: `lm_head` on the
    embedding's device at every budget, and as many layers beside them as that one matrix leaves room for)."""
    groups = blocks_of(model)
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
    """llama.cpp as its --fit (on by default) places a model (sim/engines/llamacpp/fit.py, a port of common/fit.cpp over
    llama.cpp's use of GPU memory, sim/engines/llamacpp/ggml_memory.py). Dense: -ngl N, the output head and the last N-1 blocks on
    the GPU (src/llama-model.cpp: i_gpu_start = n_layer + 1 - N, and the output is layer n_layer), as many as fit;
    the rest computed on the CPU from the memory-mapped model file (llama.cpp's default: pageable page-cache pages,
    or the disk when RAM is short); the token embedding always on the CPU; steps of >= 32 tokens copy CPU weights
    to the GPU. MoE: layers with their routed experts in system memory first, then, where every layer fits so,
    layers made whole from the front. Raises PlanError when even that does not fit the budgets."""
    plan, _ = fit_placement(model, machine, w, budgets)
    check_plan(model, plan, w, budgets)
    return plan


@register("stream")
def stream(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """Everything streamed through pinned staging with full copy/compute overlap: weights in pinned RAM while the
    pinned budget lasts, then pageable RAM, then disk; prefetch two units ahead with three VRAM slots when they fit."""
    biggest = max(u.nbytes for u in model.units)
    names = [u.name for u in model.units]
    tiers = host_tiers(model, names, budgets, 3 * biggest, True)
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
