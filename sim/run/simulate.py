"""One entry point for both engines: build the schedule, run SimPy or the fast evaluator, summarize."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwmodels.specs import MachineSpec
from sim.run.events import Event
from sim.run.fast import evaluate
from sim.costs.load import load_time_s
from sim.analysis.metrics import summary
from sim.plan import Budgets, Plan, Workload
from sim.run.items import Schedule
from sim.run.placed import build_placed_schedule
from sim.model.shapes import ModelShape
from sim.run.timeline import Timeline


@dataclass(frozen=True)
class SimResult:
    summary: dict
    events: tuple[Event, ...]
    schedule: Schedule
    c_start: np.ndarray
    c_end: np.ndarray


def _loop_args(plan: Plan) -> dict:
    return dict(prefetch_depth=plan.prefetch_depth, overlap_copy=plan.overlap_copy, vram_slots=plan.vram_slots,
                pinned_slots=plan.pinned_slots, reader_threads=plan.reader_threads)


def simulate(model: ModelShape, machine: MachineSpec, plan: Plan, workload: Workload, budgets: Budgets) -> SimResult:
    """The SimPy timeline with full event records."""
    sch = build_placed_schedule(model, machine, plan, workload, budgets)
    tl = Timeline(sch, **_loop_args(plan))
    events = tl.run()
    n = len(sch)
    c_start, c_end = np.zeros(n), np.zeros(n)
    index = {key: i for i, key in enumerate(zip(sch.step.tolist(), sch.unit.tolist()))}
    unit_idx = {name: k for k, name in enumerate(sch.names)}
    for e in events:
        if e.stage == "compute":
            i = index[(e.token, unit_idx[e.unit])]
            c_start[i], c_end[i] = e.start_s, e.end_s
    s = summary(sch, c_start, c_end, sch.memory, tl.cache.hits, tl.cache.misses, events)
    s["load"] = load_time_s(model, machine, plan, workload.warm)
    s["compute_model"] = sch.compute_sources
    return SimResult(s, tuple(events), sch, c_start, c_end)


def fast_simulate(model: ModelShape, machine: MachineSpec, plan: Plan, workload: Workload, budgets: Budgets) -> dict:
    """The fast evaluator's summary (no event records); raises fast.Unsupported for SimPy-only features."""
    sch = build_placed_schedule(model, machine, plan, workload, budgets)
    r = evaluate(sch, **_loop_args(plan))
    return summary(sch, r.c_start, r.c_end, sch.memory, r.cache_hits, r.cache_misses)
