"""Accelerate's placement: what transformers' `device_map="auto"` does (../shared/reference/peer-engines.md)."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.costs.memory import check_plan
from sim.costs.tiers import tier_row
from sim.engines.common import blocks_of, make_plan
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload


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
    (get_module_size_with_ties: the tied module goes where the embedding goes; measured in lab/data/peers/peers-r.json:
    `lm_head` on the embedding's device at every budget, and as many layers beside them as that one matrix leaves room
    for)."""
    groups = blocks_of(model)
    if model.tied_head:
        head = [g for g in groups if any(model.unit(n).kind == "lm_head" for n in g)]
        emb = next((g for g in groups if any(model.unit(n).kind == "embedding" for n in g)), None)
        if head and emb is not None and head[0] is not emb:
            emb.extend(head[0])
            groups.remove(head[0])
    size = [sum(model.unit(n).nbytes - model.unit(n).tied_nbytes for n in g) for g in groups]
    # the reserve is the largest module Accelerate will not split: a decoder block whole, but of the head unit only
    # the head's matrix (the final norm is a module of its own; peers-q.json's CPU took one more layer on a 2 kB margin)
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
    on_cpu = not any(tier_row(t).resident for t in tiers.values())
    plan = make_plan(model, machine, policy, tiers, {n: "cpu" for n in tiers} if on_cpu else None, prefetch_depth=0,
                     overlap_copy=False, vram_slots=1, pinned_slots=0, pinned_staging=False, engine="accelerate")
    check_plan(model, plan, w, budgets)
    return plan
