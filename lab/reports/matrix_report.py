"""Summarise validation-matrix runs (lab/campaigns/h200_matrix.py output): every run re-predicted with the current
simulator from what the run recorded (the calibrated profile, the model shape, the plan, the workload, the budgets),
against what the engine measured. A run whose executed items (each step's copies and computes) are not what
today's schedule of its plan gives (a peer's placement emulated with the peer's schedule of the code of the day) keeps
the prediction recorded with it (`predicted_as_recorded` counts them). Writes a JSON summary and prints the markdown
table of lab/journal/validation.md.

    python lab/reports/matrix_report.py lab/data/validation/matrix-b.json lab/data/validation/matrix-c.json \
        --json lab/data/validation/matrix-summary.json
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from sim.costs.memory import memory_use, streamed_units
from sim.plan import Budgets, Plan, Workload
from sim.model.shapes import ModelShape
from sim.run.simulate import simulate
from validate.accuracy.errors import error_pct
from validate.accuracy import matrix as accuracy_matrix
from validate.accuracy.matrix import executed


def err(p: float, m: float) -> float:
    return error_pct(p, m)


def busy(events) -> float:
    """Seconds the compute lane works: each compute counted from the later of its start and the previous end."""
    comps = sorted((e for e in events if e[2] == "compute"), key=lambda e: e[4])
    total, prev = 0.0, 0.0
    for e in comps:
        total += max(e[4] - max(e[3], prev), 0.0)
        prev = max(prev, e[4])
    return total


def run_inputs(entry: dict, run: dict) -> tuple:
    """(shape, machine, plan, workload, budgets, VRAM offloadsim's engine needed) of a recorded run
    (validate.accuracy.matrix.run_inputs, the budgets widened to the VRAM it took)."""
    shape, machine, plan, w, budgets = accuracy_matrix.run_inputs(entry, run)
    need = memory_use(shape, plan.model_copy(update={"engine": "offloadsim"}), w, budgets).vram_bytes
    return shape, machine, plan, w, budgets, need


def repredict(entry: dict, run: dict) -> dict:
    shape, machine, plan, w, room, need = run_inputs(entry, run)
    budgets = Budgets.model_validate(run["budgets"])
    sim = simulate(shape, machine, plan, w, room)
    pred_events = [[e.token, e.unit, e.stage, e.start_s, e.end_s] for e in sim.events]
    meas = run["measured"]
    row = {"file": run["_file"], "arch": entry["arch"], "layers": shape.n_blocks, "label": run["label"], "batch": run["batch"],
           "prompt": run["prompt"], "cold": run["cold"], "gpu_only": run["gpu_only"],
           "tpot_pred_s": sim.summary["time_per_token_s"], "tpot_meas_s": meas["time_per_token_s"],
           "ttft_pred_s": sim.summary["ttft_s"], "ttft_meas_s": meas["ttft_s"],
           "compute_pred_s": busy(pred_events), "compute_meas_s": busy(run["measured_events"]),
           "load_pred_s": sim.summary["load"]["total_s"], "load_meas_s": run["load"]["measured_s"],
           "bit_identical": run["exactness"]["logits_bit_identical"],
           "max_abs_logit_diff": run["exactness"]["max_abs_logit_diff"], "over_budget_today": need > budgets.vram_bytes}
    if executed(pred_events) != executed(run["measured_events"]):
        # today's schedule of this plan is not what the run executed (a peer's placement emulated with the peer's
        # schedule of the code of the day): the prediction recorded with the run is the one that describes it
        rec, stage = run["predicted"], run["per_stage"]["compute"]
        row.update(tpot_pred_s=rec["time_per_token_s"], ttft_pred_s=rec["ttft_s"], compute_pred_s=stage["predicted_s"],
                   compute_meas_s=stage["measured_s"], as_recorded=True)
    for k in ("tpot", "ttft", "compute", "load"):
        row[f"{k}_err_pct"] = err(row[f"{k}_pred_s"], row[f"{k}_meas_s"])
    if "host_gbps" in run and entry.get("host_gbps"):  # the host's CPU speed at the run against after calibration
        row["host_vs_calibration"] = run["host_gbps"] / entry["host_gbps"]
    if "gpu_memory" in run:  # the memory model of today against the allocator's peak (calls from M on)
        row.update(vram_pred_bytes=need,
                   vram_meas_bytes=run["gpu_memory"]["measured_peak_bytes"],
                   unused_slots=unused_slot_bytes(shape, plan, w, run["_file"]))
        row["vram_err_pct"] = err(row["vram_pred_bytes"], row["vram_meas_bytes"])
    return row


# the calls whose engine sized its VRAM slots by every non-resident unit (validate/engine.py sizes them by
# sim.costs.memory.streamed_units from commit 0f20859 on)
SLOTS_BY_EVERY_UNIT = frozenset({"matrix-m.json"})


def unused_slot_bytes(shape: ModelShape, plan: Plan, w: Workload, file: str) -> int:
    """VRAM the engine of call M took in staging slots beyond what the units it staged needed: it sized its slots by
    every non-resident unit, CPU-computed ones too. Those runs measured that engine, not today's: left out of the
    memory figures and counted apart. 0 for the calls after it."""
    if Path(file).name not in SLOTS_BY_EVERY_UNIT:
        return 0
    t = plan.tiers()
    then = max((u.nbytes for u in shape.units if t[u.name].tier != "vram"), default=0)
    now = max((u.nbytes for u in shape.units if u.name in streamed_units(shape, plan, w)), default=0)
    return plan.vram_slots * (then - now)


def memory_stats(rows: list[dict]) -> dict | None:
    """Predicted GPU memory (sim.costs.memory.memory_use) against the peak torch's allocator held during the run: the
    error, and how many runs held more than predicted (a plan checked at its budget could run out of memory)."""
    rs = [r for r in rows if "vram_err_pct" in r and not r["unused_slots"]]
    if not rs:
        return None
    e = [r["vram_err_pct"] for r in rs]
    return {"n": len(rs), "median_abs_pct": float(np.median(np.abs(e))), "most_under_pct": float(min(e)),
            "most_over_pct": float(max(e)), "held_more_than_predicted": sum(x < 0 for x in e),
            "most_above_mib": max(0.0, max((r["vram_meas_bytes"] - r["vram_pred_bytes"]) / 2**20 for r in rs)),
            "left_out_unused_slots": sum(bool(r.get("unused_slots")) for r in rows),
            "refused_today": sum(r["over_budget_today"] for r in rows)}


def stats(rows: list[dict], key: str) -> dict:
    e = np.abs([r[f"{key}_err_pct"] for r in rows])
    return {"median_abs_pct": float(np.median(e)), "worst_abs_pct": float(np.max(e)), "n": len(rows)}


CLASSES = (("planner", "planner"), ("CPU", "cpu"), ("llamacpp", "cpu"), ("compressed", "compressed (RAM, disk)"),
           ("disk raw", "disk raw"), ("pageable", "pageable / partly pinned"), ("pinned budget", "pageable / partly pinned"),
           ("pinned", "pinned RAM"), ("resident", "resident"))


def plan_class(label: str) -> str:
    return next(name for key, name in CLASSES if key in label)


def by_class(rows: list[dict]) -> dict:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[plan_class(r["label"])].append(r)
    return {k: {"time_per_token": stats(v, "tpot"), "ttft": stats(v, "ttft")} for k, v in groups.items()}


def _spread_pct(xs: list[float]) -> float:
    """(max - min) / mean of measured times, in percent."""
    return (max(xs) - min(xs)) / float(np.mean(xs)) * 100


def spread_summary(by_key: dict) -> dict:
    """Run-to-run spread of the measured time per token: the same plan in fresh engines of one call (per call
    file), and across calls (each call's first run of the plan)."""
    within, across = [], []
    for v in by_key.values():
        per_file: dict[str, list[float]] = defaultdict(list)
        for r in v:
            per_file[r["file"]].append(r["tpot_meas_s"])
        within += [{"label": v[0]["label"].replace(" (repeat)", ""), "arch": v[0]["arch"], "file": f,
                    "spread_pct": _spread_pct(xs)} for f, xs in per_file.items() if len(xs) > 1]
        if len(per_file) > 1:
            across.append(_spread_pct([xs[0] for xs in per_file.values()]))
    return {"within_call": within,
            "across_calls": {"pairs": len(across), "median_pct": float(np.median(across)),
                             "worst_pct": float(np.max(across))} if across else None}


def summarize(files: list[str], skip: frozenset = frozenset()) -> dict:
    """`skip`: 'FILE:ARCH' entries left out (an architecture measured again in a later call)."""
    rows, archs = [], []
    for f in files:
        data = json.loads(Path(f).read_text())
        for entry in data["archs"]:
            if "error" in entry or f"{Path(f).name}:{entry['arch']}" in skip:
                continue
            archs.append({"file": Path(f).name, "arch": entry["arch"], "transformers": entry.get("transformers"),
                          "resident_repeat": entry.get("resident_repeat"), "calibrate_s": entry.get("calibrate_s")})
            for run in entry["runs"]:
                if "measured" in run:
                    rows.append(repredict(entry, dict(run, _file=Path(f).name)))
    gpu = [r for r in rows if r["gpu_only"]]
    by_key = defaultdict(list)
    for r in rows:
        by_key[(r["arch"], r["layers"], r["label"].replace(" (repeat)", ""), r["batch"], r["prompt"])].append(r)
    spread = [{"arch": k[0], "layers": k[1], "label": k[2], "batch": k[3], "prompt": k[4],
               "files": [r["file"] for r in v],
               "tpot_meas_s": [r["tpot_meas_s"] for r in v],
               "spread_pct": _spread_pct([r["tpot_meas_s"] for r in v])}
              for k, v in by_key.items() if len(v) > 1]
    return {"spread_summary": spread_summary(by_key), "files": [Path(f).name for f in files], "runs": len(rows),
            "time_per_token": stats(rows, "tpot"), "ttft": stats(rows, "ttft"), "compute_stage": stats(rows, "compute"),
            "load": stats([r for r in rows if r["cold"]], "load") if any(r["cold"] for r in rows) else None,
            "bit_identical_gpu_plans": f"{sum(r['bit_identical'] for r in gpu)}/{len(gpu)}",
            "predicted_as_recorded": sum(r.get("as_recorded", False) for r in rows),
            "within_10pct": f"{sum(abs(r['tpot_err_pct']) <= 10 for r in rows)}/{len(rows)}", "by_class": by_class(rows),
            "gpu_memory": memory_stats(rows),
            "archs": archs, "spread": spread, "rows": rows}


def table(s: dict) -> str:
    out = ["| file | arch | plan | batch | prompt | cold | tpot pred / meas (s) | err | TTFT pred / meas (s) | err | "
           "compute err | bit-identical |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        out.append(f"| {r['file']} | {r['arch']} | {r['label']} | {r['batch']} | {r['prompt']} | {'yes' if r['cold'] else ''} | "
                   f"{r['tpot_pred_s']:.4f} / {r['tpot_meas_s']:.4f} | {r['tpot_err_pct']:+.1f}% | "
                   f"{r['ttft_pred_s']:.4f} / {r['ttft_meas_s']:.4f} | {r['ttft_err_pct']:+.1f}% | "
                   f"{r['compute_err_pct']:+.1f}% | {'yes' if r['bit_identical'] else ('CPU' if not r['gpu_only'] else 'no')} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--skip", default="", help="FILE:ARCH,... left out of the figures")
    a = ap.parse_args()
    s = summarize(a.files, frozenset(x for x in a.skip.split(",") if x))
    if a.json:
        Path(a.json).write_text(json.dumps(s, indent=1, default=float))
    print(json.dumps({k: v for k, v in s.items() if k not in ("rows", "archs", "spread", "spread_summary", "by_class")}, indent=1))
    print("| class | runs | tpot median | tpot worst | TTFT median | TTFT worst |\n|---|---|---|---|---|---|")
    for k, v in s["by_class"].items():
        t, f = v["time_per_token"], v["ttft"]
        print(f"| {k} | {t['n']} | {t['median_abs_pct']:.1f}% | {t['worst_abs_pct']:.1f}% | {f['median_abs_pct']:.1f}% "
              f"| {f['worst_abs_pct']:.1f}% |")
    print(json.dumps(s["spread_summary"], indent=1))
    print(table(s))


if __name__ == "__main__":
    main()
