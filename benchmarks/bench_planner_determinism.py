"""Planner determinism, monotonicity (a larger budget seeded with the smaller one's plan, and planned alone),
quality against seeds and peers, gap to the lower bound and to brute force, and planning times.
Writes lab/data/planner/bench_planner_determinism.json.

    python benchmarks/bench_planner_determinism.py [--instances 108] [--repeats 5] [--deepseek]
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hwmodels import get_machine  # noqa: E402
from hwmodels.units import GiB  # noqa: E402
from planner import plan_with_report  # noqa: E402
from planner.evaluator import Evaluator  # noqa: E402
from planner.choices import OPTIONS  # noqa: E402
from planner.pareto import plan_budgets, plan_upgrade  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402
from sim.plan import Budgets, Request, Workload  # noqa: E402
from tests.test_planner_properties import RAW, SETTINGS, TOY  # noqa: E402
from tests.toys import toy_model  # noqa: E402

TIMING_REPEATS = 3   # planning times: the median of this many runs (machines here are shared), and the first
W = Workload(prompt_tokens=64, new_tokens=3)
CONFIGS = [("qwen3-14b", "rtx3080-laptop", 4.0), ("qwen3-14b", "t4-cloud", 8.0), ("llama-3.1-8b", "rtx3080-laptop", 3.7),
           ("llama-3.1-8b", "desktop-4090", 6.0), ("mixtral-8x7b", "desktop-4090", 16.0),
           ("mixtral-8x7b", "t4-cloud", 7.4), ("qwen3-14b", "desktop-4090", 12.0), ("llama-3.1-8b", "t4-cloud", 5.0),
           ("mixtral-8x7b", "h200-testbox", 70.2), ("qwen3-14b", "h200-testbox", 20.0)]


def run(name, machine, budgets, **kw):
    m, q = get_machine(machine), load_model(name)
    return plan_with_report(q, m, kw.pop("w", W), budgets, **kw)


def determinism(repeats: int) -> dict:
    diffs, rows = 0, []
    for name, machine, vram in CONFIGS:
        m = get_machine(machine)
        b = Budgets.of(m, vram=int(vram * GiB))
        plans = []
        for r in range(repeats):
            load = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if r >= repeats // 2 else None
            try:
                plans.append(run(name, machine, b).plan.model_dump_json())
            finally:
                if load:
                    load.kill()
                    load.wait()
        d = len(set(plans)) - 1
        diffs += d
        rows.append({"model": name, "machine": machine, "vram_gib": vram, "distinct_plans": d + 1})
    return {"configs": len(CONFIGS), "repeats": repeats, "runs_under_load": repeats - repeats // 2,
            "plan_differences": diffs, "rows": rows}


def instances(n: int):
    models = ["qwen3-14b", "llama-3.1-8b", "mixtral-8x7b"]
    machines = ["rtx3080-laptop", "t4-cloud", "desktop-4090", "h200-testbox"]
    rng = np.random.default_rng(0)
    for k in itertools.count():
        if k >= n:
            return
        name, machine = models[k % 3], machines[(k // 3) % 4]
        m, q = get_machine(machine), load_model(name)
        cap_v, cap_r = m.gpu.vram_bytes, m.host_memory.capacity_bytes
        vram = int(rng.uniform(0.15, 0.9) * min(cap_v, q.total_bytes))
        ram = int(rng.uniform(0.3, 0.9) * cap_r)
        b = Budgets(vram_bytes=vram, ram_bytes=ram, pinned_bytes=int(rng.uniform(0, 0.6) * ram))
        axis = ["vram", "ram", "pinned"][k % 3]
        cap = {"vram": cap_v, "ram": cap_r, "pinned": b.ram_bytes}[axis]
        more = min(cap, int(getattr(b, f"{axis}_bytes") * 1.25) + GiB)
        yield name, machine, b, axis, b.model_copy(update={f"{axis}_bytes": more})


def faster(machine: str, k: float = 1.25):
    """The preset with every host-to-device speed k times higher."""
    m = get_machine(machine)
    link = m.link.model_copy(update={
        "pinned_h2d_bytes_per_s": m.link.pinned_h2d_bytes_per_s * k, "pageable_h2d_bytes_per_s": m.link.pageable_h2d_bytes_per_s * k,
        "by_size": tuple(p.model_copy(update={"pinned_bytes_per_s": p.pinned_bytes_per_s * k,
                                               "pageable_bytes_per_s": p.pageable_bytes_per_s * k}) for p in m.link.by_size)})
    return m, m.model_copy(update={"link": link})


def link_quality(n: int) -> dict:
    """The link axis: each instance's smaller budget on the preset and on a variant with a 25% faster link, the
    second seeded with the first (plan_upgrade) and planned alone."""
    viol = alone_viol = 0
    rows = []
    for name, machine, b, _, _ in instances(n):
        slow, fast = faster(machine)
        q = load_model(name)
        a, c = plan_upgrade(q, slow, fast, W, b)
        if not a.plan.feasible:
            continue
        alone = plan_with_report(q, fast, W, b)
        ta, tc, t_alone = (r.summary["time_per_token_s"] for r in (a, c, alone))
        v, v_alone = tc > ta * (1 + 1e-9), t_alone > ta * (1 + 1e-9)
        viol, alone_viol = viol + v, alone_viol + v_alone
        rows.append({"model": name, "machine": machine, "time_per_token_s": ta, "faster_link_s": tc,
                     "violation": bool(v), "independent_s": t_alone, "independent_violation": bool(v_alone)})
    return {"instances": n, "feasible": len(rows), "monotonicity_violations": viol,
            "independent_violations": alone_viol, "rows": rows}


def quality(n: int) -> dict:
    """Per instance: the plan at the smaller budget, the plan at the larger one seeded with it (plan_budgets, the
    construction that makes the planner monotone: `monotonicity_violations`), and the larger budget planned alone
    (`independent_violations`: two unrelated calls, not guaranteed; lab/journal/planner.md)."""
    viol, alone_viol, rows, beaten, gaps, times = 0, 0, [], 0, [], []
    for name, machine, b, axis, bigger in instances(n):
        a, c = plan_budgets(load_model(name), get_machine(machine), W, [b, bigger])
        alone = run(name, machine, bigger)
        times.append(a.seconds)
        if not a.plan.feasible:
            continue
        ta = a.summary["time_per_token_s"]
        tc, t_alone = (r.summary["time_per_token_s"] if r.plan.feasible else float("inf") for r in (c, alone))
        v, v_alone = tc > ta * (1 + 1e-9), t_alone > ta * (1 + 1e-9)
        viol, alone_viol = viol + v, alone_viol + v_alone
        best_other = min([s["time_per_token_s"] for s in a.baselines.values() if "time_per_token_s" in s] + [float("inf")])
        seed_best = min(a.seeds.values())
        lost = ta > best_other * (1 + 1e-9) or seed_best < min(a.seeds.get("search", np.inf), ta) * (1 - 1e-6)
        beaten += lost
        gaps.append(a.gap)
        rows.append({"model": name, "machine": machine, "axis": axis, "time_per_token_s": ta, "bigger_s": tc,
                     "violation": bool(v), "bigger_chosen_from": c.chosen_from, "independent_s": t_alone,
                     "independent_violation": bool(v_alone), "beaten": bool(lost), "gap": a.gap, "stopped": a.stopped})
    feas = len(rows)
    return {"instances": n, "feasible": feas, "monotonicity_violations": viol, "independent_violations": alone_viol,
            "planner_not_worse_pct": 100.0 * (feas - beaten) / max(feas, 1), "median_gap_to_lower_bound": statistics.median(gaps),
            "median_planning_s": statistics.median(times), "rows": rows}


def brute_force(n: int) -> dict:
    rng, worst, rows = np.random.default_rng(1), 0.0, 0
    for _ in range(n):
        sizes = tuple(int(x) for x in rng.integers(1, 30, size=int(rng.integers(1, 4))))
        model, w = toy_model(sizes), Workload(prompt_tokens=int(rng.integers(1, 4)), new_tokens=3)
        b = Budgets(vram_bytes=max(sizes) + int(rng.integers(0, 50)), ram_bytes=int(rng.integers(0, 100)),
                    pinned_bytes=int(rng.integers(0, 50)))
        ev = Evaluator(Request(model, TOY, w, b), None)
        best = min([t[1] + 1e-9 * t[2] for combo in itertools.product(RAW, repeat=len(sizes)) for s in SETTINGS
                    if (t := ev.times(np.array(combo), (*s[:3], s[3] if s[3] != 1 else None)))] + [float("inf")])
        got = plan_with_report(model, TOY, w, b, tiers=tuple(t for t, _ in OPTIONS if not t.endswith("compressed")))
        if best < float("inf") and got.plan.feasible:
            rows += 1
            worst = max(worst, got.summary["time_per_token_s"] / (best - 1e-9 * 0) - 1)
    return {"instances": rows, "worst_gap_to_brute_force": worst}


def timed(name: str, machine: str, budgets: Budgets, repeats: int = TIMING_REPEATS) -> tuple[float, float, str]:
    """(first, median) seconds of `repeats` plans with the default workload in this process, and why the search
    stopped; the first also fills the compute-time caches of that workload."""
    times, stopped = [], ""
    for _ in range(repeats):
        t = time.perf_counter()
        stopped = run(name, machine, budgets, w=Workload()).stopped
        times.append(time.perf_counter() - t)
    return times[0], statistics.median(times), stopped


def timings(deepseek: bool) -> dict:
    out = {}
    first, median, _ = timed("qwen3-14b", "rtx3080-laptop", Budgets.of(get_machine("rtx3080-laptop"), vram=4 * GiB))
    out["qwen3-14b_rtx3080-laptop_4GiB_s"], out["qwen3-14b_rtx3080-laptop_4GiB_first_s"] = median, first
    if deepseek:
        m = get_machine("xeon-4090")
        first, median, stopped = timed("deepseek-r1", "xeon-4090", Budgets.of(m, vram=22 * GiB, ram=340 * GiB))
        out["deepseek-r1_xeon-4090_s"], out["deepseek-r1_xeon-4090_first_s"] = median, first
        out["deepseek-r1_stopped"] = stopped
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=108)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--brute", type=int, default=30)
    ap.add_argument("--link-instances", type=int, default=36)
    ap.add_argument("--deepseek", action="store_true")
    ap.add_argument("--out", default="lab/data/planner/bench_planner_determinism.json")
    a = ap.parse_args()
    res = {"determinism": determinism(a.repeats), "brute_force": brute_force(a.brute), "quality": quality(a.instances),
           "link": link_quality(a.link_instances), "timings": timings(a.deepseek)}
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=1))
    tmp.replace(a.out)
    for key in ("quality", "link"):
        print(key, json.dumps({k: v for k, v in res[key].items() if k != "rows"}, indent=1))
    print(json.dumps({k: v for k, v in res["determinism"].items() if k != "rows"}), res["brute_force"], res["timings"])


if __name__ == "__main__":
    main()
