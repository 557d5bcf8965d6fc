"""`offloadsim validate`: run a plan on the engine, simulate it with the profile, and report predicted against
measured per token and per stage, with an overlaid Gantt chart, both Chrome traces and the exactness verdict."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from hwmodels.specs import MachineSpec
from sim.run.events import Event, write_chrome_trace
from sim.costs.memory import memory_use
from hwmodels.files import write_atomic
from sim.plan import Budgets, Plan, Workload
from sim.engines.placements import POLICIES
from sim.run.simulate import simulate
from sim.model.shapes import ModelShape
from validate.engine import Engine, RunResult
from sim.analysis.plots import COLORS, LANE_ORDER


def per_token(events: list[Event]) -> list[float]:
    ends: dict[int, float] = {}
    for e in events:
        if e.stage == "compute":
            ends[e.token] = max(ends.get(e.token, 0.0), e.end_s)
    toks = sorted(ends)
    return [ends[t] - (ends[toks[k - 1]] if k else 0.0) for k, t in enumerate(toks)]


def per_stage(events: list[Event]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for e in events:
        out[e.stage] += e.duration_s
    return dict(out)


def wait_per_token(events: list[Event]) -> float:
    """Seconds a decode step's compute lanes stand idle waiting for weights (the timeline's and the engine's "wait"
    events), the mean over the decode steps (every step after the first token; 0 with none)."""
    steps = {e.token for e in events if e.stage == "compute" and e.token > 0}
    waits = sum(e.duration_s for e in events if e.stage == "wait" and e.token > 0)
    return waits / len(steps) if steps else 0.0


def err(pred: float, meas: float) -> float:
    return (pred - meas) / meas * 100 if meas else float("nan")


def exactness(ref: RunResult, run: RunResult) -> dict:
    same_tokens = torch.equal(ref.tokens, run.tokens)
    same_logits = all(torch.equal(a, b) for a, b in zip(ref.logits, run.logits))
    steps = [float((a - b).abs().max()) for a, b in zip(ref.logits, run.logits)]
    return {"tokens_identical": same_tokens, "logits_bit_identical": same_logits, "max_abs_logit_diff": max(steps),
            "per_step_max_abs_diff": steps}


def overlay_gantt(pred: list[Event], meas: list[Event], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 1, figsize=(12, 5), sharex=True)
    for ax, evs, label in ((axes[0], pred, "predicted"), (axes[1], meas, "measured")):
        lanes = [lane for lane in LANE_ORDER if any(e.resource == lane for e in pred + meas)]
        for row, lane in enumerate(lanes):
            for stage in COLORS:
                bars = [(e.start_s, max(e.duration_s, 1e-9)) for e in evs if e.resource == lane and e.stage == stage]
                if bars:
                    ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=COLORS[stage], label=stage)
        ax.set_yticks(range(len(lanes)), lanes)
        ax.invert_yaxis()
        ax.set_ylabel(label)
    axes[1].set_xlabel("time (s)")
    axes[0].set_title(title, fontsize=9)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)


def validate_plan(engine: Engine, shape: ModelShape, machine: MachineSpec, plan: Plan, w: Workload, budgets: Budgets,
                  cold: bool, reference: RunResult | None) -> tuple[dict, RunResult, list[Event]]:
    """One plan measured and predicted; returns the comparison, the run and the predicted events."""
    run = engine.run(w, cold=cold)
    sim_w = w.model_copy(update={"warm": not cold})
    sim = simulate(shape, machine, plan, sim_w, budgets)
    pred_events = list(sim.events)
    pt, mt = per_token(pred_events), per_token(run.events)
    ps, ms = per_stage(pred_events), per_stage(run.events)
    rep = {"policy": plan.policy, "cold": cold,
           "predicted": {"ttft_s": sim.summary["ttft_s"], "time_per_token_s": sim.summary["time_per_token_s"],
                         "total_s": sim.summary["total_s"]},
           "measured": {"ttft_s": run.ttft_s, "time_per_token_s": run.time_per_token_s, "total_s": run.total_s,
                        "cuda_graphs": run.graphs},
           "error_pct": {"ttft": err(sim.summary["ttft_s"], run.ttft_s),
                         "time_per_token": err(sim.summary["time_per_token_s"], run.time_per_token_s)},
           "per_token": [{"token": k, "predicted_s": p, "measured_s": m, "error_pct": err(p, m)} for k, (p, m) in enumerate(zip(pt, mt))],
           "per_stage": {s: {"predicted_s": ps.get(s, 0.0), "measured_s": ms.get(s, 0.0), "error_pct": err(ps.get(s, 0.0), ms.get(s, 0.0))}
                         for s in sorted(set(ps) | set(ms))}}
    pw, mw = wait_per_token(pred_events), wait_per_token(run.events)
    rep["wait_per_token"] = {"predicted_s": pw, "measured_s": mw,  # the difference as a share of the measured rate
                             "diff_pct_of_tpot": (pw - mw) / run.time_per_token_s * 100 if run.time_per_token_s else 0.0}
    rep["load"] = {"predicted_s": sim.summary["load"]["total_s"], "measured_s": engine.load_s,
                   "error_pct": err(sim.summary["load"]["total_s"], engine.load_s), "by_stage": sim.summary["load"]}
    rep["compute_model"] = sim.summary["compute_model"]
    if run.gpu_peak_bytes:  # the memory model against the allocator: is the budget the plan was checked at enough?
        predicted = memory_use(shape, plan, sim_w, budgets).vram_bytes
        rep["gpu_memory"] = {"predicted_bytes": predicted, "measured_peak_bytes": run.gpu_peak_bytes,
                             "error_pct": err(predicted, run.gpu_peak_bytes)}
    if reference is not None:
        rep["exactness"] = exactness(reference, run)
    return rep, run, pred_events


def write_report(out: Path, rep: dict, run: RunResult, pred_events: list[Event], name: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / f"{name}.json", json.dumps(rep, indent=1, default=float))
    write_chrome_trace(pred_events, out / f"{name}.predicted.trace.json", "predicted")
    write_chrome_trace(run.events, out / f"{name}.measured.trace.json", "measured")
    overlay_gantt(pred_events, run.events, out / f"{name}.gantt.png",
                  f"{name}: predicted {rep['predicted']['time_per_token_s']:.4f} s/token, "
                  f"measured {rep['measured']['time_per_token_s']:.4f} s/token")


def reference_run(store: Path, config: dict, shape: ModelShape, machine: MachineSpec, w: Workload, device=None):
    """The all-resident run (the exactness reference); None when the model does not fit the device."""
    plan = POLICIES["resident"](shape, machine, w, Budgets.unlimited())
    try:
        return Engine(store, config, shape, plan, machine, device).run(w)
    except torch.OutOfMemoryError:
        return None


def summarize(rows: list[dict]) -> dict:
    errs = [abs(r["error_pct"]["time_per_token"]) for r in rows]
    return {"median_abs_error_pct": float(np.median(errs)), "worst_abs_error_pct": float(np.max(errs)), "plans": len(rows)}
