"""How close the planner's heuristic path (integer program + local search, exhaustive mode switched off) comes to the
brute-force optimum on random toy instances with 3 tiers; the planner's default (exhaustive when small) matches it
by construction and is tested in tests/test_planner.py.
Run: python benchmarks/bench_optimality.py [--instances 20] [--max-layers 7]"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import planner.core as core  # noqa: E402
from sim.plan import Budgets, Workload  # noqa: E402
from sim.run.simulate import fast_simulate  # noqa: E402
from tests.test_planner import TOY, brute_force  # noqa: E402  (the test's machine and brute force)
from tests.toys import toy_model  # noqa: E402

THREE = ("vram", "ram_pinned", "disk_raw")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=20)
    ap.add_argument("--max-layers", type=int, default=7)
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    core.EXACT_LIMIT = 0  # heuristic path only
    ratios = []
    t0 = time.perf_counter()
    for k in range(a.instances):
        n = int(rng.integers(3, a.max_layers + 1))
        sizes = tuple(int(x) for x in rng.integers(1, 40, n))
        model = toy_model(sizes)
        w = Workload(prompt_tokens=1, new_tokens=int(rng.integers(2, 5)))
        b = Budgets(vram_bytes=2 * max(sizes) + int(rng.integers(0, 80)), ram_bytes=3 * max(sizes) + int(rng.integers(40, 200)),
                    pinned_bytes=2 * max(sizes) + int(rng.integers(20, 100)))
        opt = brute_force(model, w, b)
        got = core.plan(model, TOY, w, b, tiers=THREE, allow_cpu=False, time_budget_s=2.0)
        if opt == float("inf"):
            continue
        t = fast_simulate(model, TOY, got, w, b)["time_per_token_s"] if got.feasible else float("inf")
        ratios.append(t / opt)
        print(f"instance {k}: {n} layers, optimum {opt:.4f}, heuristic {t:.4f} ({t / opt:.3f}x)", flush=True)
    r = np.array(ratios)
    print(json.dumps({"instances": len(r), "optimal": int(np.sum(r <= 1 + 1e-9)), "median_ratio": float(np.median(r)),
                      "worst_ratio": float(r.max()), "seconds": time.perf_counter() - t0}))
