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

SHAPES = {
    # hidden 3584, 28 heads over 4 KV heads, MLP 12288, 12 layers, vocabulary 32000
    "w3584": ["--preset", "llama-3.1-8b", "--layers", "12", "--hidden", "3584", "--intermediate", "12288",
              "--heads", "28", "--kv-heads", "4", "--vocab", "32000"],
    # hidden 2560, 20 heads over 4 KV heads, MLP 8960, 10 layers, vocabulary 49152
    "w2560": ["--preset", "llama-3.1-8b", "--layers", "10", "--hidden", "2560", "--intermediate", "8960",
              "--heads", "20", "--kv-heads", "4", "--vocab", "49152"],
    # hidden 3072, 24 heads over 8 KV heads, MLP 8192, 10 layers, vocabulary 32768
    "w3072": ["--preset", "llama-3.1-8b", "--layers", "10", "--hidden", "3072", "--intermediate", "8192",
              "--heads", "24", "--kv-heads", "8", "--vocab", "32768"],
}
# (label, plan flags, workload flags, cold) at the first shape's weights (4.3 GiB)
CASES = [
    ("vram25-pin1-b1-p1024", ["--vram", "1.1GiB", "--pinned", "1GiB"], ["--batch", "1", "--prompt-tokens", "1024"], False),
    ("vram15-pin0.5-b1-p2048", ["--vram", "0.65GiB", "--pinned", "0.5GiB"], ["--batch", "1", "--prompt-tokens", "2048"], False),
    ("vram40-pin1-b8-p1024", ["--vram", "1.75GiB", "--pinned", "1GiB"], ["--batch", "8", "--prompt-tokens", "1024"], False),
    ("vram25-pin1-b32-p128", ["--vram", "1.1GiB", "--pinned", "1GiB"], ["--batch", "32", "--prompt-tokens", "128"], False),
    ("vram60-gpu-b8-p512", ["--vram", "2.6GiB"], ["--batch", "8", "--prompt-tokens", "512"], False),
]
# (label, VRAM share of the weights, pinned GiB, batch, prompt, cold): the planner's own choices at tight budgets
MATRIX = [
    ("v15-b1-p2048", 0.15, 0.5, 1, 2048, False),
    ("v25-b1-p1024-cold", 0.25, 0.5, 1, 1024, True),
    ("v25-b1-p4096", 0.25, 0.5, 1, 4096, False),
    ("v40-b8-p1024", 0.40, 0.5, 8, 1024, False),
    ("v45-b32-p256", 0.45, 0.5, 32, 256, False),
    ("v60-b8-p512", 0.60, 0.0, 8, 512, False),
]


def matrix_cases(weights_bytes: int) -> list:
    """MATRIX as plan flags for a checkpoint of `weights_bytes`."""
    out = []
    for label, share, pinned, batch, prompt, cold in MATRIX:
        budget = ["--vram", f"{share * weights_bytes / 2**30:.3f}GiB"] + (["--pinned", f"{pinned}GiB"] if pinned else [])
        out.append((label, budget, ["--batch", str(batch), "--prompt-tokens", str(prompt)], cold))
    return out


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
    ap.add_argument("--work", default=None, help="default /tmp/offloadsim-heldout-SHAPE")
    ap.add_argument("--new-tokens", default="8")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=520, help="start no validation after this many seconds")
    ap.add_argument("--quick-calibrate", action="store_true")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="w3584")
    ap.add_argument("--matrix", action="store_true", help="the share-of-weights MATRIX instead of CASES")
    ap.add_argument("--traces", default=None, help="a folder for each run's report, traces and chart")
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    work = Path(args.work or f"/tmp/offloadsim-heldout-{args.shape}")
    ck, prof = work / "ckpt", work / "profile.json"
    rec = {"shape": shape, "cases": [], "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    work.mkdir(parents=True, exist_ok=True)
    if args.traces:
        Path(args.traces).mkdir(parents=True, exist_ok=True)
    if not ck.exists() and cli("make-checkpoint", *shape, "--device", "cuda", "--out", str(ck)).returncode:
        return 1
    log("checkpoint")
    t = time.perf_counter()
    cal = cli("calibrate", "--model", str(ck / "config.json"), "--base", "h200-testbox", "--dir", str(work),
              "--out", str(prof), *(["--quick"] if args.quick_calibrate else []))
    rec["calibrate_s"], rec["calibrate_rc"] = time.perf_counter() - t, cal.returncode
    log("calibrated", cal.returncode)
    machine = str(prof) if prof.exists() else "h200-testbox"
    if prof.exists():  # the calibration the predictions used, kept beside the record
        Path(args.out).with_suffix(".profile.json").write_text(prof.read_text())
    out = Path(args.out)
    weights = sum(f.stat().st_size for f in ck.glob("*.safetensors"))
    for label, budget, wl, cold in (matrix_cases(weights) if args.matrix else CASES):
        plan_path = work / f"{label}.plan.json"
        p = cli("plan", str(ck), "--machine", machine, *budget, *wl, "--new-tokens", args.new_tokens,
                "--out", str(plan_path), "--json")
        case = {"label": label, "budget": budget, "workload": wl, "cold": cold, "plan_rc": p.returncode,
                "plan": json.loads(p.stdout) if p.returncode == 0 else p.stderr[-400:], "runs": [],
                "plan_file": json.loads(plan_path.read_text()) if p.returncode == 0 else None}
        for r in range(args.repeats):
            if p.returncode or time.perf_counter() - T0 > args.budget_s:
                break
            v = cli("validate", "--checkpoint", str(ck), "--plan", str(plan_path), "--profile", machine, *budget[:2],
                    *wl, "--new-tokens", args.new_tokens, *(["--cold"] if cold else []), "--json",
                    *(["--out", str(Path(args.traces) / f"{label}-{r}")] if args.traces else []))
            case["runs"].append(json.loads(v.stdout) if v.returncode == 0 else {"error": v.stderr[-400:]})
            e = case["runs"][-1].get("error_pct", {})
            log(label, f"round {r}", f"tpot {e.get('time_per_token', float('nan')):+.1f}%",
                f"ttft {e.get('ttft', float('nan')):+.1f}%")
        rec["cases"].append(case)
        out.write_text(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
