"""How often a measured run lands inside the interval `offloadsim simulate` states for a plan that computes on the
CPU (sim/analysis/interval.py `cpu_range`: the time per token with every CPU grid at both ends of a prediction interval from
the spread calibrate measured), on the recorded H200 runs:
- the exported Accelerate plans of the peers calls (priced as `plan --engine accelerate` prices them today: the
  call's profile and the preset's Accelerate costs, lab/reports/peers_report.py `--preset`);
- offloadsim's own engine running every plan of the validation calls that computes on the CPU
  (lab/reports/matrix_report.py's inputs; a run predicted as recorded is left out, as there).
A run whose profile's CPU grids carry no spread (timed once, calls before K) has no interval and is not counted.
`--factor K` prices the interval at K spreads either side instead (0.5 was the earlier half-range).

    python lab/probes/interval_coverage.py --peers lab/data/peers/peers-{b,c,d,e,g,h,i}.json \
        --matrix lab/data/validation/matrix/matrix-{k,l,m,n,o,p,q}.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import sim.analysis.interval as interval
from lab.reports.matrix_report import executed, run_inputs
from lab.reports.peers_report import exported_runs
from sim.run.simulate import simulate


def peers_cases(files: list[str]):
    """(label, model, machine, plan, workload, budgets, measured s/token) of every exported Accelerate plan."""
    for name, arch, r, shape, machine, plan, w, big in exported_runs(files, "h200-testbox"):
        yield f"{name} {arch} {r['label']}", shape, machine, plan, w, big, r["time_per_token_s"]


def matrix_cases(files: list[str]):
    """The same for every validation run whose plan computes on the CPU and runs as today's schedule of it."""
    for f in files:
        for e in json.loads(Path(f).read_text())["archs"]:
            if "error" in e:
                continue
            for run in e["runs"]:
                if "measured" not in run:
                    continue
                shape, machine, plan, w, room, _ = run_inputs(e, run)
                if not any(p.compute == "cpu" for p in plan.placements):
                    continue
                events = [[x.token, x.unit, x.stage, x.start_s, x.end_s]
                          for x in simulate(shape, machine, plan, w, room).events]
                if executed(events) != executed(run["measured_events"]):
                    continue  # matrix_report keeps the recorded prediction for these
                yield (f"{Path(f).name} {e['arch']} {run['label']} b{run['batch']} p{run['prompt']}", shape,
                       machine, plan, w, room, run["measured"]["time_per_token_s"])


def coverage(cases, factor: float | None) -> dict:
    n = inside = 0
    for label, shape, machine, plan, w, budgets, measured in cases:
        rng = interval.cpu_range(shape, machine, plan, w, budgets, factor)
        if rng is None:
            continue
        lo, hi = rng["time_per_token_s"]
        n += 1
        inside += lo <= measured <= hi
        print(f"  {label}: {lo:.4f}-{hi:.4f} s, measured {measured:.4f} {'inside' if lo <= measured <= hi else 'OUT'}")
    return {"runs": n, "inside": inside}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", nargs="*", default=[])
    ap.add_argument("--matrix", nargs="*", default=[])
    ap.add_argument("--factor", type=float, default=None, help="spreads either side (default: sim.analysis.interval's)")
    a = ap.parse_args()
    k = a.factor if a.factor is not None else interval.interval_factor()
    print(f"interval: {k:.3f} spreads either side of the prediction")
    for name, cases in (("exported Accelerate plans", peers_cases(a.peers)), ("validation runs with CPU compute",
                                                                               matrix_cases(a.matrix))):
        print(name)
        got = coverage(cases, a.factor)
        print(f"{name}: {got['inside']} of {got['runs']} measured inside")


if __name__ == "__main__":
    main()
