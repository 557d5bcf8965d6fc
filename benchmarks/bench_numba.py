"""Is numba worth its install weight (issue 14)? The fast evaluator on the planner's kind of workload, compiled with
numba against the same recurrence run as plain Python over numpy arrays.
Run: python benchmarks/bench_numba.py"""
from __future__ import annotations

import json
import time

import sim.fast as F
from hwmodels import get_machine
from sim.models import load_model
from sim.plan import Budgets, Workload
from sim.policies import POLICIES
from sim.schedule import build_schedule


def best(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


if __name__ == "__main__":
    F.warm_up()
    machine, model = get_machine("desktop-4090"), load_model("llama-3.1-70b")
    w = Workload(prompt_tokens=128, new_tokens=64)
    b = Budgets.of(machine, vram=8 * 2**30)
    plan = POLICIES["stream"](model, machine, w, b)
    sch = build_schedule(model, machine, plan, w, b)
    args = dict(prefetch_depth=plan.prefetch_depth, overlap_copy=plan.overlap_copy, vram_slots=plan.vram_slots,
                pinned_slots=plan.pinned_slots)
    compiled = best(lambda: F.evaluate(sch, **args), 5)
    F._recurrence = F._recurrence_py
    plain = best(lambda: F.evaluate(sch, **args), 2)
    print(json.dumps({"items": len(sch), "numba_ms": compiled * 1e3, "plain_ms": plain * 1e3,
                      "ratio": plain / compiled}, indent=1))
