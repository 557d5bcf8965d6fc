"""A lower bound on the request's simulated total for every plan a peer engine can run (`plan` prints one per engine).

The simulator runs every compute item after the previous one ends (one chain over the GPU and the CPU), so a plan's
total is at least the sum of its items' compute seconds. A unit's compute in a step is priced by its engine from
where the unit is computed (the GPU, or the CPU from pageable or pinned RAM, perhaps multiplied on the GPU in a large
step); the bound charges each (unit, step) the least of those prices, read off the engine's own schedules of the
uniform placements (every unit resident on the GPU, every unit on the CPU from pageable or pinned RAM, with and
without the offload of large steps), with no memory budget. Checked against every `-ngl` plan and every engine's
chosen plan by benchmarks/bench_engine_bound.py.
"""
from __future__ import annotations

import numpy as np

from hwmodels.specs import MachineSpec
from sim.costs.memory import PlanError
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Placement, Plan, Workload
from sim.run.fast import Unsupported
from sim.run.schedule import build_schedule

UNIFORM = (("vram", "gpu"), ("ram_pageable", "cpu"), ("ram_pinned", "cpu"))


def engine_bound_s(model: ModelShape, machine: MachineSpec, w: Workload, template: Plan,
                   vram_bytes: int | None = None) -> float:
    """The least total any plan of `template`'s engine and runtime settings can reach (NaN if no uniform placement
    can be priced). `vram_bytes`: for an engine that computes on the CPU what the GPU does not hold (it streams
    nothing), the VRAM budget: the units priced on the GPU then hold at most that many weight bytes, filled by the
    compute saved per byte with the last unit split (the knapsack's linear relaxation, below its every integer
    solution)."""
    gpu = _least(model, machine, w, template, UNIFORM[:1])
    host = _least(model, machine, w, template, UNIFORM[1:])
    if gpu is None or host is None:
        least = gpu if host is None else host
        return float("nan") if least is None else float(least.sum())
    n = len(model.units)
    per_unit_gpu = gpu.reshape(n, -1).sum(axis=1)
    per_unit_host = host.reshape(n, -1).sum(axis=1)
    cheap = np.minimum(per_unit_gpu, per_unit_host)
    if vram_bytes is None:
        return float(cheap.sum())
    nbytes = np.array([u.nbytes for u in model.units], dtype=float)
    saved = np.maximum(per_unit_host - per_unit_gpu, 0.0)
    total, room = float(per_unit_host.sum()), float(vram_bytes)
    for i in np.argsort(-saved / np.maximum(nbytes, 1.0), kind="stable"):
        if saved[i] <= 0 or room <= 0:
            break
        share = min(1.0, room / max(nbytes[i], 1.0))
        total -= share * saved[i]
        room -= share * nbytes[i]
    return total


def _least(model: ModelShape, machine: MachineSpec, w: Workload, template: Plan, uniform) -> np.ndarray | None:
    """Per (unit, step): the least compute seconds of the uniform placements `uniform` (None if none is priced)."""
    least = None
    for tier, dev in uniform:
        placements = tuple(Placement.model_construct(unit=u.name, tier=tier, compute=dev) for u in model.units)
        for offload in {template.gpu_offload_min_tokens, None} if dev == "cpu" else {template.gpu_offload_min_tokens}:
            plan = template.model_copy(update={"placements": placements, "gpu_offload_min_tokens": offload})
            try:
                sch = build_schedule(model, machine, plan, w, Budgets.unlimited())
            except (PlanError, Unsupported, ValueError):
                continue
            per = np.bincount(np.asarray(sch.unit) * sch.n_steps + np.asarray(sch.step), weights=sch.compute_s,
                              minlength=len(model.units) * sch.n_steps)
            least = per if least is None else np.minimum(least, per)
    return least
