"""Timeline figures: SimPy events/s, fast-evaluator layer-steps/s and their speed ratio on an
80-layer, 64-token run, and the evaluator compiled by numba against plain Python; and `simulate qwen3-14b --machine rtx3080-laptop` for every policy, cold, at the minimum
VRAM and at 4 GB, with Gantt charts. Run: python benchmarks/bench_timeline.py [--out docs/figures]"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hwmodels import get_machine
from sim.analysis.critical import critical_path
from sim.run.fast import evaluate
from sim.costs.memory import PlanError, min_vram_bytes
from sim.model.resolve import load_model
from sim.plan import Budgets, Workload
from sim.analysis.plots import gantt
from sim.engines.placements import POLICIES
from sim.run.schedule import build_schedule
from sim.run.simulate import simulate
from sim.run.timeline import Timeline


def speed(reps: int = 3) -> dict:
    machine, model = get_machine("desktop-4090"), load_model("llama-3.1-70b")
    w = Workload(prompt_tokens=128, new_tokens=64)
    b = Budgets.of(machine, vram=8 * 2**30)
    plan = POLICIES["stream"](model, machine, w, b)
    sch = build_schedule(model, machine, plan, w, b)
    args = dict(prefetch_depth=plan.prefetch_depth, overlap_copy=plan.overlap_copy, vram_slots=plan.vram_slots,
                pinned_slots=plan.pinned_slots)
    simpy_s, fast_s = [], []
    for _ in range(reps):
        t = time.perf_counter()
        tl = Timeline(sch, **args)
        events = tl.run()
        simpy_s.append(time.perf_counter() - t)
        n_simpy_events = next(tl.env._eid)  # SimPy's own counter of scheduled events
        t = time.perf_counter()
        evaluate(sch, **args)
        fast_s.append(time.perf_counter() - t)
    plain = _plain_recurrence_s(sch, args)
    return {"run": "llama-3.1-70b on desktop-4090, stream policy, 8 GiB VRAM, 128-token prompt + 64 tokens",
            "fast_plain_python_s": plain, "numba_speedup": plain / min(fast_s),
            "items (layer-steps)": len(sch), "simpy_s": min(simpy_s), "fast_s": min(fast_s),
            "simpy_events_per_s": n_simpy_events / min(simpy_s), "records": len(events),
            "fast_layer_steps_per_s": len(sch) / min(fast_s), "speedup": min(simpy_s) / min(fast_s)}


def _plain_recurrence_s(sch, args: dict) -> float:
    """The fast evaluator with its recurrence run as plain Python over numpy (is numba worth its install weight?)."""
    import sim.run.fast as F
    compiled, F._recurrence = F._recurrence, F._recurrence_py
    try:
        t = time.perf_counter()
        evaluate(sch, **args)
        return time.perf_counter() - t
    finally:
        F._recurrence = compiled


def policies(out: Path) -> list[dict]:
    machine, model = get_machine("rtx3080-laptop"), load_model("qwen3-14b")
    w = Workload(prompt_tokens=128, new_tokens=8, warm=False)
    rows = []
    for label, vram in (("min", min_vram_bytes(model, w)), ("4GB", 4 * 10**9)):
        b = Budgets.of(machine, vram=vram)
        for name in ("airllm", "accelerate", "llamacpp", "stream"):
            try:
                plan = POLICIES[name](model, machine, w, b)
            except PlanError as exc:
                rows.append({"vram": label, "vram_bytes": vram, "policy": name, "infeasible": str(exc)})
                continue
            res = simulate(model, machine, plan, w, b)
            s = res.summary
            png = out / f"gantt-qwen3-14b-laptop-{name}-{label}.png"
            gantt(list(res.events), png, f"qwen3-14b on rtx3080-laptop, {name}, VRAM {label}", tokens=(5, 7),
                  critical=critical_path(list(res.events), plan.prefetch_depth))
            rows.append({"vram": label, "vram_bytes": vram, "policy": name, "ttft_s": s["ttft_s"],
                         "time_per_token_s": s["time_per_token_s"], "stall_per_token_s": s["stall_per_token_s"],
                         "stall_by_cause_s": s["stall_by_cause_s"], "gantt": str(png)})
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/bench")
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"speed": speed(), "policies": policies(out)}
    print(json.dumps(result, indent=1))
    (out / "bench_timeline.json").write_text(json.dumps(result, indent=1))
