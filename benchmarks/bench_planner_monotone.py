"""The planner behind `plan`, `pareto` and `whatif`: monotonicity of independent `plan` answers over upgrade pairs,
and `whatif` rows against `plan` answers for the same combination.

(b) `--pairs`: on every machine preset, models x workloads x VRAM levels, each base budget against five upgrades
(VRAM +0.5 GiB, RAM +25%, pinned RAM x2, a disk 1.25x faster in every rate, a link 1.25x faster), both planned alone
(planner.engines.plan_answer, as `plan` plans them); a violation is an upgrade whose request time is above the base's.
(a) `--whatif`: grids of VRAM x RAM x link per machine and model through planner.whatif.grid, every row against
plan_answer for that combination alone; identical means the same request time and the same plan.

    python benchmarks/bench_planner_monotone.py --pairs --workers 16 --out /tmp/pairs.json
    python benchmarks/bench_planner_monotone.py --whatif --workers 16 --out /tmp/whatif.json
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from hwmodels import get_machine, list_machines
from hwmodels.units import GiB
from planner.engines import plan_answer
from planner.whatif import grid, variant
from sim.costs.memory import min_vram_bytes
from sim.model.formats import parse_format
from sim.model.resolve import load_model
from sim.plan import OS_RESERVE_BYTES, Budgets, Request, Workload

MODELS = (("qwen3-14b", None), ("llama-3.1-8b", None), ("mixtral-8x7b", "q4_k_m"))
WORKLOADS = (Workload(prompt_tokens=128, new_tokens=8), Workload(batch=4, prompt_tokens=256, new_tokens=4))
LEVELS = 7


def _model(name: str, dtype: str | None):
    return load_model(name, None if dtype is None else parse_format(dtype))


def faster(machine, factor: float = 1.25):
    """The machine with a disk and a link `factor` faster in every rate (two variants)."""
    st = machine.storage
    disk = machine.model_copy(update={"storage": st.model_copy(update={
        "cold_read_bytes_per_s": st.cold_read_bytes_per_s * factor,
        "cache_read_bytes_per_s": st.cache_read_bytes_per_s * factor})})
    ln = machine.link
    sizes = tuple(p.model_copy(update={"pinned_bytes_per_s": p.pinned_bytes_per_s * factor,
                                       "pageable_bytes_per_s": p.pageable_bytes_per_s * factor}) for p in ln.by_size)
    link = machine.model_copy(update={"link": ln.model_copy(update={
        "pinned_h2d_bytes_per_s": ln.pinned_h2d_bytes_per_s * factor,
        "pageable_h2d_bytes_per_s": ln.pageable_h2d_bytes_per_s * factor, "by_size": sizes})})
    return disk, link


def _request_s(req: Request) -> tuple[float | None, str]:
    rep, _ = plan_answer(req)
    if not rep.plan.feasible:
        return None, ""
    return rep.summary["request_s"], rep.plan.model_dump_json()


def level_pairs(args) -> list[dict]:
    """The five upgrade pairs of one (machine, model, workload, VRAM level)."""
    mname, (model_name, dtype), wi, level, levels = args
    machine, model, w = get_machine(mname), _model(model_name, dtype), WORKLOADS[wi]
    lo = min_vram_bytes(model, w)
    hi = min(machine.gpu.vram_bytes - GiB // 2, model.total_bytes + lo)
    if hi <= lo:
        return []
    vram = int(np.linspace(lo, hi, levels)[level])
    ram = min(max(int(model.total_bytes * 0.6), 8 * GiB), machine.host_memory.capacity_bytes - OS_RESERVE_BYTES) * 4 // 5
    base = Budgets(vram_bytes=vram, ram_bytes=ram, pinned_bytes=ram // 4)
    disk, link = faster(machine)
    ups = {"vram": (machine, base.model_copy(update={"vram_bytes": vram + GiB // 2})),
           "ram": (machine, base.model_copy(update={"ram_bytes": ram * 5 // 4})),
           "pinned": (machine, base.model_copy(update={"pinned_bytes": ram // 2})),
           "disk": (disk, base), "link": (link, base)}
    t0, _ = _request_s(Request(model, machine, w, base))
    out = []
    for kind, (m, b) in ups.items():
        t1, _ = _request_s(Request(model, m, w, b))
        out.append({"machine": mname, "model": model_name, "workload": wi, "level": level, "upgrade": kind,
                    "base_s": t0, "upgraded_s": t1,
                    "violation": t0 is not None and (t1 is None or t1 > t0 * (1 + 1e-9)),
                    "ratio": (t1 / t0) if t0 and t1 else None})
    return out


def whatif_case(args) -> list[dict]:
    """A VRAM x RAM x link grid through whatif, each row against plan_answer alone."""
    mname, (model_name, dtype), wi = args
    machine, model, w = get_machine(mname), _model(model_name, dtype), WORKLOADS[wi]
    lo = min_vram_bytes(model, w)
    hi = min(machine.gpu.vram_bytes, model.total_bytes + lo)
    vrams = [f"{v / GiB:.2f}GiB" for v in np.linspace(lo + GiB // 4, max(hi, lo + GiB // 2), 3)]
    cap = machine.host_memory.capacity_bytes
    rams = [f"{r / GiB:.0f}GiB" for r in (cap // 2, cap)]
    vary = {"vram": vrams, "ram": rams, "link": ["pcie3", "pcie4"]}
    data = grid(model, machine, w, vary, workers=1, progress=False)
    out = []
    for row in data["rows"]:
        m, budget = variant(machine, row["combo"])
        alone, _ = (None, "") if not row["feasible"] else _request_s(
            Request(model, m, w, Budgets.of(m, vram=budget.get("vram"), ram=budget.get("ram"))))
        out.append({"machine": mname, "model": model_name, "workload": wi, "combo": row["combo"],
                    "whatif_s": row.get("request_s"), "plan_s": alone, "identical": row.get("request_s") == alone})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", action="store_true")
    ap.add_argument("--whatif", action="store_true")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--machines", nargs="*", default=list_machines())
    ap.add_argument("--models", type=int, default=len(MODELS), help="the first N of MODELS")
    ap.add_argument("--workloads", type=int, default=len(WORKLOADS), help="the first N of WORKLOADS")
    ap.add_argument("--levels", type=int, default=LEVELS, help="VRAM levels per machine and model")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    t0 = time.perf_counter()
    result = {}
    with ProcessPoolExecutor(a.workers) as pool:
        if a.pairs:
            jobs = [(*j, a.levels) for j in itertools.product(a.machines, MODELS[:a.models], range(a.workloads),
                                                              range(a.levels))]
            rows = [r for rs in pool.map(level_pairs, jobs) for r in rs]
            bad = [r for r in rows if r["violation"]]
            result["pairs"] = {"pairs": sum(r["base_s"] is not None for r in rows), "violations": len(bad),
                               "worst_ratio": max((r["ratio"] for r in bad if r["ratio"]), default=None),
                               "by_upgrade": {k: sum(r["upgrade"] == k for r in bad) for k in
                                              ("vram", "ram", "pinned", "disk", "link")},
                               "violating": bad}
        if a.whatif:
            jobs = list(itertools.product(a.machines, MODELS[:a.models], range(a.workloads)))
            rows = [r for rs in pool.map(whatif_case, jobs) for r in rs]
            result["whatif"] = {"combinations": len(rows), "identical": sum(r["identical"] for r in rows),
                                "different": [r for r in rows if not r["identical"]]}
    result["seconds"] = time.perf_counter() - t0
    text = json.dumps(result, indent=1)
    if a.out:
        a.out.write_text(text)
    summary = {k: ({kk: vv for kk, vv in v.items() if kk not in ("violating", "different")} if isinstance(v, dict)
                   else v) for k, v in result.items()}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
