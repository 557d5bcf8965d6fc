"""How close the planner's heuristic path (integer program + local search with moves and swaps, the exhaustive mode
switched off) comes to the brute-force optimum (every assignment x loader setting, scored by the same evaluator:
the planner's exhaustive mode) on random toy instances of 3-7 units, half of them with CPU compute allowed.
Run: python benchmarks/bench_optimality.py [--instances 60] [--max-layers 7] [--objective request]"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import planner.core as core  # noqa: E402
from planner.judge import objective_of  # noqa: E402
from sim.costs.load import load_time_s  # noqa: E402
from sim.plan import Budgets, Workload  # noqa: E402
from sim.run.simulate import fast_simulate  # noqa: E402
from tests.test_planner import TOY  # noqa: E402  (the test's machine)
from tests.toys import toy_model  # noqa: E402

THREE = ("vram", "ram_pinned", "disk_raw")


def objective(model, plan, w, b, name: str) -> float:
    if not plan.feasible:
        return float("inf")
    s = fast_simulate(model, TOY, plan, w, b)
    s["load_s"] = load_time_s(model, TOY, plan, w.warm)["total_s"]
    return objective_of(s, name)


def instance(rng) -> tuple:
    n = int(rng.integers(3, ARGS.max_layers + 1))
    sizes = tuple(int(x) for x in rng.integers(1, 40, n))
    cpu = bool(rng.integers(0, 2))
    w = Workload(prompt_tokens=int(rng.integers(1, 4)), new_tokens=int(rng.integers(2, 5)))
    b = Budgets(vram_bytes=2 * max(sizes) + int(rng.integers(0, 80)), ram_bytes=3 * max(sizes) + int(rng.integers(40, 200)),
                pinned_bytes=2 * max(sizes) + int(rng.integers(20, 100)))
    return toy_model(sizes), w, b, cpu


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=60)
    ap.add_argument("--max-layers", type=int, default=7)
    ap.add_argument("--objective", default="request", choices=("request", "total", "token"))
    ARGS = ap.parse_args()
    rng = np.random.default_rng(1)
    ratios, t0 = [], time.perf_counter()
    for k in range(ARGS.instances):
        model, w, b, cpu = instance(rng)
        kw = dict(tiers=THREE, allow_cpu=cpu, objective=ARGS.objective)
        core.EXACT_LIMIT = 10**7  # the reference: every assignment x loader setting
        opt = objective(model, core.plan(model, TOY, w, b, **kw), w, b, ARGS.objective)
        core.EXACT_LIMIT = 0  # the heuristic path
        got = objective(model, core.plan(model, TOY, w, b, **kw), w, b, ARGS.objective)
        if opt == float("inf"):
            continue
        ratios.append(got / opt)
        print(f"instance {k}: {len(model.units)} units, cpu {cpu}, optimum {opt:.4f}, heuristic {got:.4f} "
              f"({got / opt:.3f}x)", flush=True)
    r = np.array(ratios)
    print(json.dumps({"instances": len(r), "optimal": int(np.sum(r <= 1 + 1e-9)), "median_ratio": float(np.median(r)),
                      "worst_ratio": float(r.max()), "seconds": time.perf_counter() - t0}))
