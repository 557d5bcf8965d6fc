"""The model's error beside the host's: every plan of the held-out campaign, timed twice per call in two calls with
separate calibrations (lab/campaigns/h200_heldout_planner.py).

For each plan and metric it prints each run's error, the floor of the repeats within each call and across all runs
(no single prediction can be closer to all of them: validate.accuracy.errors.floor_pct), and a verdict: a miss whose
runs all err the same way by more than their floor is the model's; one whose repeats disagree by as much as the miss
is the host's. The model's error per plan is the median over its runs.

    python benchmarks/heldout_report.py lab/data/heldout/heldout-a.json lab/data/heldout/heldout-b.json

`--repredict` predicts every run again with this code, from the calibration the call made (FILE.profile.json beside
each record), the plan the call chose and the checkpoint's shape: the measured times stay as they were measured.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from validate.accuracy.errors import floor_pct

METRICS = (("time_per_token_s", "time per token"), ("ttft_s", "first token"))


def runs_of(files: list[Path], repredict: bool = False) -> dict[str, list[dict]]:
    """label -> [{call, predicted, measured, bit_identical}] over every validated run of the files."""
    out: dict[str, list[dict]] = {}
    for f in files:
        doc = json.loads(f.read_text())
        again = predictor(f, doc) if repredict else None
        for case in doc["cases"]:
            for r in case["runs"]:
                if "predicted" in r:
                    out.setdefault(case["label"], []).append(
                        {"call": f.stem, "predicted": again(case) if again else r["predicted"],
                         "measured": r["measured"], "bit_identical": r.get("exactness", {}).get("logits_bit_identical"),
                         "wait_diff_pct": r.get("wait_per_token", {}).get("diff_pct_of_tpot")})
    return out


def predictor(record: Path, doc: dict):
    """case -> {ttft_s, time_per_token_s}: the case's plan simulated by this code on the call's own calibration."""
    from hwmodels.presets import load_machine
    from hwmodels.units import parse_bytes
    from sim.model.families import shape_from_config
    from sim.plan import Budgets, Placement, Plan, Workload
    from sim.run.simulate import simulate
    from validate.checkpoint import make_config
    machine = load_machine(str(record.with_suffix(".profile.json")))
    a = dict(zip(doc["shape"][::2], doc["shape"][1::2]))
    cfg = make_config(a["--preset"], num_hidden_layers=int(a["--layers"]), hidden_size=int(a["--hidden"]),
                      intermediate_size=int(a["--intermediate"]), num_attention_heads=int(a["--heads"]),
                      num_key_value_heads=int(a["--kv-heads"]), vocab_size=int(a["--vocab"]))
    shape = shape_from_config(dict(cfg, torch_dtype="bfloat16"))

    def predict(case: dict) -> dict:
        p, wl = case["plan"], dict(zip(case["workload"][::2], case["workload"][1::2]))
        # the plan file where the record keeps it; older records: rebuilt from plan's report (no codec, no offload
        # threshold: none of their plans had either)
        plan = Plan.model_validate(case["plan_file"]) if case.get("plan_file") else \
            Plan(model=p["model"], machine=p["machine"], policy="planner", prefetch_depth=p["prefetch_depth"],
                 vram_slots=p["vram_slots"], pinned_slots=p["pinned_slots"],
                 placements=[Placement(unit=x["unit"], tier=x["tier"], compute=x["compute"]) for x in p["layers"]])
        w = Workload(batch=int(wl["--batch"]), prompt_tokens=int(wl["--prompt-tokens"]),
                     new_tokens=int(doc.get("new_tokens", 8)), warm=not case["cold"])
        vram = dict(zip(case["budget"][::2], case["budget"][1::2]))["--vram"]
        s = simulate(shape, machine, plan, w, Budgets.of(machine, vram=parse_bytes(vram, "vram"))).summary
        return {"ttft_s": s["ttft_s"], "time_per_token_s": s["time_per_token_s"]}
    return predict


def verdict(errors: list[float], floor: float) -> str:
    """'model' when every run misses the same way by more than the repeats' floor, 'host' when the floor is as
    large as the median miss, else 'mixed'."""
    med = abs(statistics.median(errors))
    if all(e > 0 for e in errors) or all(e < 0 for e in errors):
        if min(abs(e) for e in errors) > floor:
            return "model"
    return "host" if floor >= med else "mixed"


def report(runs: dict[str, list[dict]]) -> list[dict]:
    rows = []
    for label in sorted(runs):
        rs = runs[label]
        for key, name in METRICS:
            errs = [(r["predicted"][key] / r["measured"][key] - 1) * 100 for r in rs]
            per_call = {}
            for r in rs:
                per_call.setdefault(r["call"], []).append(r["measured"][key])
            within = max((floor_pct(t) for t in per_call.values() if len(t) > 1), default=float("nan"))
            across = floor_pct([r["measured"][key] for r in rs])
            rows.append({"plan": label, "metric": name, "runs": len(rs), "calls": len(per_call),
                         "errors_pct": [round(e, 1) for e in errs], "median_pct": round(statistics.median(errs), 1),
                         "floor_within_call_pct": round(within, 1), "floor_across_calls_pct": round(across, 1),
                         "verdict": verdict(errs, across),
                         "worst_wait_diff_pct": max((abs(r["wait_diff_pct"]) for r in rs
                                                     if r["wait_diff_pct"] is not None), default=None),
                         "bit_identical": [r["bit_identical"] for r in rs]})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repredict", action="store_true", help="predict every run again with this code")
    args = ap.parse_args()
    rows = report(runs_of(args.files, args.repredict))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'plan':<24} {'metric':<15} {'runs':>4} {'errors (%)':<30} {'median':>7} {'floor in':>8} "
          f"{'floor all':>9}  {'verdict':<7}  wait")
    for r in rows:
        wait = r["worst_wait_diff_pct"]
        print(f"{r['plan']:<24} {r['metric']:<15} {r['runs']:>4} {' '.join(f'{e:+.1f}' for e in r['errors_pct']):<30} "
              f"{r['median_pct']:>+6.1f}% {r['floor_within_call_pct']:>7.1f}% {r['floor_across_calls_pct']:>8.1f}%  "
              f"{r['verdict']:<7}  {'' if wait is None or r['metric'] != 'time per token' else f'{wait:.1f}%'}")
    for _, name in METRICS:
        meds = [abs(r["median_pct"]) for r in rows if r["metric"] == name]
        print(f"{name}: median of the plans' median errors {statistics.median(meds):.1f}%, worst {max(meds):.1f}% "
              f"({len(meds)} plans)")
    print("wait: the largest |predicted - measured| decode wait per token over a plan's runs, as a share of the "
          "measured time per token (recorded by validate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
