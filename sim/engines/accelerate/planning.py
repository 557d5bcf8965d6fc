"""The fastest device_map Accelerate can run at the budgets (`plan --engine accelerate`). Accelerate copies an
offloaded module in before each forward (blocking, pageable, no prefetch), so a unit's cost off the GPU does not
depend on the others: the best map keeps the units that cost most per byte off the GPU, a knapsack solved greedily
by that density (exact up to the last unit that does not fit), and it is never worse than Accelerate's own map.
The map is one transformers can load (sim/engines/accelerate/device_map.py): a block's experts as one module, kept
with their layer where Accelerate's hooks need it."""
from __future__ import annotations

import numpy as np

from hwmodels.specs import MachineSpec
from sim.costs.equations import copy_time_s
from sim.costs.memory import PlanError, activation_bytes, kv_cache_bytes
from sim.engines import costs_of
from sim.engines.accelerate.device_map import loadable_tiers
from sim.engines.accelerate.placement import accelerate, accelerate_map as run_map
from sim.engines.ranking import best_of
from sim.model.shapes import ModelShape, param_modules
from sim.plan import Budgets, Plan, Workload


def best_accelerate_map(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                        objective: str = "token") -> Plan:
    """The fastest device_map Accelerate can run at these budgets (greedy by seconds saved per byte). A head tied to
    the embedding goes where the embedding goes (transformers shares the one matrix; Accelerate places them
    together): the pair is one item of the embedding's bytes, costing both units' copies off the GPU."""
    peer = costs_of(machine, "accelerate")
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
        return loadable_tiers(model, tiers)  # as the exported device_map loads it
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
                  lambda: accelerate(model, machine, w, budgets)):
        try:
            cands.append(extra())
        except PlanError:
            pass
    if not cands:
        raise PlanError("Accelerate cannot run this model at these budgets (an offloaded module must fit on the GPU "
                        "beside the resident ones); raise --vram")
    return best_of(model, machine, w, budgets, cands, objective)
