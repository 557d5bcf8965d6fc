"""Held-out fidelity of the planner's own choices, run as a user runs the tool: make-checkpoint -> calibrate ->
plan -> validate, each plan validated twice in the call (the host's repeat spread beside the model's error).

The shape is one no constant of the code was fitted on (a Llama layer of hidden 3584, 28 heads over 4 KV heads, an
MLP of 12288, 12 layers, a 32000-token vocabulary). The plans are the planner's at tight budgets (VRAM 15-40% of
the weights, small pinned budgets, so RAM-resident and CPU-computed layers), and one GPU-side plan.
Run on the H200 (one call = one calibration; run it in two calls for two calibrations):
    python lab/campaigns/h200_heldout_planner.py --out $OUT/heldout-a.json
Each record keeps the command lines, the plan, and validate's JSON (predicted, measured, per stage, exactness).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SHAPE = ["--preset", "llama-3.1-8b", "--layers", "12", "--hidden", "3584", "--intermediate", "12288", "--heads", "28",
         "--kv-heads", "4", "--vocab", "32000"]
# (label, plan flags, workload flags, cold)
CASES = [
    ("vram25-pin1-b1-p1024", ["--vram", "1.1GiB", "--pinned", "1GiB"], ["--batch", "1", "--prompt-tokens", "1024"], False),
    ("vram15-pin0.5-b1-p2048", ["--vram", "0.65GiB", "--pinned", "0.5GiB"], ["--batch", "1", "--prompt-tokens", "2048"], False),
    ("vram40-pin1-b8-p1024", ["--vram", "1.75GiB", "--pinned", "1GiB"], ["--batch", "8", "--prompt-tokens", "1024"], False),
    ("vram25-pin1-b32-p128", ["--vram", "1.1GiB", "--pinned", "1GiB"], ["--batch", "32", "--prompt-tokens", "128"], False),
    ("vram60-gpu-b8-p512", ["--vram", "2.6GiB"], ["--batch", "8", "--prompt-tokens", "512"], False),
]
T0 = time.perf_counter()


def log(*a):
    print(f"[{time.perf_counter() - T0:6.0f}s]", *a, flush=True)


def cli(*args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "offloadsim", *args], capture_output=True, text=True)
    if r.returncode:
        log("FAILED", " ".join(args), r.stderr.strip()[-400:])
    return r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/offloadsim-heldout")
    ap.add_argument("--new-tokens", default="8")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=520, help="start no validation after this many seconds")
    ap.add_argument("--quick-calibrate", action="store_true")
    args = ap.parse_args()
    work = Path(args.work)
    ck, prof = work / "ckpt", work / "profile.json"
    rec = {"shape": SHAPE, "cases": [], "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    work.mkdir(parents=True, exist_ok=True)
    if not ck.exists() and cli("make-checkpoint", *SHAPE, "--device", "cuda", "--out", str(ck)).returncode:
        return 1
    log("checkpoint")
    t = time.perf_counter()
    cal = cli("calibrate", "--model", str(ck / "config.json"), "--base", "h200-testbox", "--dir", str(work),
              "--out", str(prof), *(["--quick"] if args.quick_calibrate else []))
    rec["calibrate_s"], rec["calibrate_rc"] = time.perf_counter() - t, cal.returncode
    log("calibrated", cal.returncode)
    machine = str(prof) if prof.exists() else "h200-testbox"
    out = Path(args.out)
    for label, budget, wl, cold in CASES:
        plan_path = work / f"{label}.plan.json"
        p = cli("plan", str(ck), "--machine", machine, *budget, *wl, "--new-tokens", args.new_tokens,
                "--out", str(plan_path), "--json")
        case = {"label": label, "budget": budget, "workload": wl, "cold": cold, "plan_rc": p.returncode,
                "plan": json.loads(p.stdout) if p.returncode == 0 else p.stderr[-400:], "runs": []}
        for r in range(args.repeats):
            if p.returncode or time.perf_counter() - T0 > args.budget_s:
                break
            v = cli("validate", "--checkpoint", str(ck), "--plan", str(plan_path), "--profile", machine, *budget[:2],
                    *wl, "--new-tokens", args.new_tokens, *(["--cold"] if cold else []), "--json")
            case["runs"].append(json.loads(v.stdout) if v.returncode == 0 else {"error": v.stderr[-400:]})
            e = case["runs"][-1].get("error_pct", {})
            log(label, f"round {r}", f"tpot {e.get('time_per_token', float('nan')):+.1f}%",
                f"ttft {e.get('ttft', float('nan')):+.1f}%")
        rec["cases"].append(case)
        out.write_text(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
