"""Planner figures: quality against every baseline and the lower bound on each named machine x
{qwen3-14b, llama-3.1-70b, mixtral-8x7b, deepseek-r1} x three VRAM budgets (minimum, middle, near-fit), and
planning speed. Writes a JSON and the markdown table for lab/journal/planner.md.
Run: python benchmarks/bench_planner.py [--out out/bench] [--models ...] [--machines ...]"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hwmodels import get_machine, list_machines
from hwmodels.units import GiB
from planner import plan_with_report
from sim.costs.memory import min_vram_bytes
from sim.model.resolve import load_model
from sim.plan import Budgets, Workload

MODELS = ["qwen3-14b", "llama-3.1-70b", "mixtral-8x7b", "deepseek-r1"]


def budgets_for(model, machine, w) -> dict[str, int]:
    lo = min_vram_bytes(model, w)
    near = min(machine.gpu.vram_bytes, model.total_bytes + lo)
    if near <= lo:
        return {}
    return {"min": lo, "middle": (lo + near) // 2, "near-fit": near}


def quality(models, machines, w) -> list[dict]:
    rows = []
    for mname in models:
        model = load_model(mname)
        for hname in machines:
            machine = get_machine(hname)
            for label, vram in budgets_for(model, machine, w).items():
                b = Budgets.of(machine, vram=vram)
                t = time.perf_counter()
                rep = plan_with_report(model, machine, w, b)
                secs = time.perf_counter() - t
                row = {"model": mname, "machine": hname, "budget": label, "vram_bytes": vram,
                       "feasible": rep.plan.feasible, "planning_s": secs}
                if rep.plan.feasible:
                    tp = rep.summary["time_per_token_s"]
                    base = {k: v["time_per_token_s"] for k, v in rep.baselines.items() if "time_per_token_s" in v}
                    best_name = min(base, key=base.get) if base else None
                    row.update(planner_s=tp, total_s=rep.summary["total_s"], lower_bound_total_s=rep.lower_bound_s,
                               gap=rep.gap, baselines=base, best_baseline=best_name,
                               ratio_best_baseline_over_planner=base[best_name] / tp if best_name else None)
                else:
                    row["reason"] = rep.plan.reason
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "baselines"}), flush=True)
    return rows


def speed(w) -> dict:
    out = {}
    for mname, hname, vram in (("qwen3-14b", "rtx3080-laptop", 4 * GiB), ("deepseek-r1", "xeon-4090", 22 * GiB)):
        model, machine = load_model(mname), get_machine(hname)
        t = time.perf_counter()
        plan_with_report(model, machine, w, Budgets.of(machine, vram=vram), confirm=False)
        out[f"{mname} on {hname}, {vram / GiB:.0f} GiB VRAM ({len(model.units)} units)"] = time.perf_counter() - t
    return out


def table(rows: list[dict]) -> str:
    lines = ["| model | machine | VRAM budget | planner s/token | best baseline | its s/token | baseline / planner | gap to bound |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["feasible"]:
            lines.append(f"| {r['model']} | {r['machine']} | {r['budget']} {r['vram_bytes'] / GiB:.2f} GiB | infeasible | | | | |")
            continue
        b = r["best_baseline"]
        lines.append(f"| {r['model']} | {r['machine']} | {r['budget']} {r['vram_bytes'] / GiB:.2f} GiB | {r['planner_s']:.4f} | "
                     f"{b or '-'} | {r['baselines'][b]:.4f} | {r['ratio_best_baseline_over_planner']:.2f}x | {r['gap']:.1%} |"
                     if b else f"| {r['model']} | {r['machine']} | {r['budget']} | {r['planner_s']:.4f} | none | | | {r['gap']:.1%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--machines", nargs="*", default=list_machines())
    a = ap.parse_args()
    w = Workload(prompt_tokens=128, new_tokens=16)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"workload": w.model_dump(), "speed_s": speed(w), "quality": quality(a.models, a.machines, w)}
    (out / "bench_planner.json").write_text(json.dumps(result, indent=1))
    (out / "planner_table.md").write_text(table(result["quality"]) + "\n")
    print(json.dumps(result["speed_s"], indent=1))
    worse = [r for r in result["quality"] if r.get("ratio_best_baseline_over_planner") and r["ratio_best_baseline_over_planner"] < 1 - 1e-9]
    print(f"cases: {len(result['quality'])}, planner slower than the best baseline in {len(worse)}")
