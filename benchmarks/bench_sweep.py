"""Sweep throughput: a 1,000,000-combination what-if (10 GPUs x 5 links x 10 storage x 10 RAM sizes x 4 models x
5 context lengths x 10 batch sizes, the rest of rtx3080-laptop), measured on a random sample of it, in this process and
on a local Dask cluster of 1 and 2 worker processes; the full grid's time extrapolated from the measured rates.
This process runs the first --check combinations of the sample, the serial answers every cluster's rows must equal.

Run: python benchmarks/bench_sweep.py [--sample 2000] [--check 100] [--workers 1,2]   (the cluster rows need the
sweep extra; a sample's rate varies with its share of MoE combinations at large batch x context, the slow ones)
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import time

from hwmodels import get_machine
from planner import sweep_dask
from planner.sweep import Sweep, chunks, combo_at, evaluate_chunk, in_process
from sim.model.resolve import load_model
from sim.plan import Workload

VARY = {
    "gpu": ["rtx3060", "rtx3080-laptop", "rtx4060-laptop", "rtx4070", "rtx4080", "rtx4090", "rtx5090", "l4",
            "a100-40gb", "h100-pcie"],
    "link": ["pcie3", "pcie4x8", "pcie4", "pcie5", "pcie6"],
    "storage": ["sata", "laptop-nvme", "nvme-gen3", "nvme-gen4", "nvme-gen5", "dc-gen4", "dc-gen5", "raid0-4x-gen4",
                "raid0-4x-gen5", "cloud-ssd"],
    "ram": [f"{16 * k}GiB" for k in range(1, 11)],
    "model": ["llama-3.1-8b", "qwen3-14b", "llama-3.1-70b", "mixtral-8x7b"],
    "context": ["128", "512", "2048", "8192", "32768"],
    "batch": ["1", "2", "3", "4", "6", "8", "10", "12", "14", "16"],
}
MACHINE, NEW_TOKENS = "rtx3080-laptop", 3


def timed(sweep: Sweep, backend, sample: list[int]) -> tuple[list[dict], float]:
    t = time.perf_counter()
    rows = [r for chunk in backend(sweep, chunks(sample)) for r in chunk]
    return rows, time.perf_counter() - t


def on_cluster(sweep: Sweep, workers: int, sample: list[int], warm: list[int]) -> dict:
    """Start a local cluster, warm every worker (imports, compiled kernels) on `warm`, then time the sample."""
    t = time.perf_counter()
    with sweep_dask.client(workers) as c:
        started = time.perf_counter() - t
        c.run(evaluate_chunk, sweep, warm)
        rows, secs = timed(sweep, sweep_dask.backend(c), sample)
    return {"rows": rows, "seconds": secs, "startup_s": started}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=2000)
    ap.add_argument("--check", type=int, default=100)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sweep = Sweep({m: load_model(m) for m in VARY["model"]}, get_machine(MACHINE),
                  Workload(prompt_tokens=128, new_tokens=NEW_TOKENS), VARY)
    sample = random.Random(args.seed).sample(range(sweep.size), args.sample)
    warm = [i for i in range(0, sweep.size, 997) if combo_at(VARY, i)["model"] == "llama-3.1-8b"][:4]
    evaluate_chunk(sweep, warm)  # this process's compiled kernels loaded before the clock starts
    serial, secs = timed(sweep, in_process, sample[:args.check])
    key = {i: r for i, r in zip(sample, serial)}
    out = {"grid_combinations": sweep.size, "sample": len(sample), "seed": args.seed,
           "runs": [{"where": "this process", "workers": 1, "combinations": len(serial), "seconds": secs,
                     "combinations_per_s": len(serial) / secs}]}
    if sweep_dask.available():
        for n in map(int, args.workers.split(",")):
            r = on_cluster(sweep, n, sample, warm)
            same = all(row == key[_index(row)] for row in r["rows"] if _index(row) in key)
            out["runs"].append({"where": "local Dask cluster", "workers": n, "combinations": len(r["rows"]),
                                "seconds": r["seconds"], "startup_s": r["startup_s"],
                                "combinations_per_s": len(r["rows"]) / r["seconds"],
                                "feasible": sum(x["feasible"] for x in r["rows"]),
                                f"first_{len(serial)}_rows_equal_this_process": same})
    else:
        out["note"] = f"Dask is not installed: {sweep_dask.INSTALL} for the cluster rows"
    cl = [r for r in out["runs"] if r["where"] != "this process"]
    if len(cl) >= 2:
        out["scaling_2_over_1_worker"] = cl[1]["combinations_per_s"] / cl[0]["combinations_per_s"]
    out["EXTRAPOLATED_full_grid_hours"] = {f"{r['where']}, {r['workers']} worker(s)": sweep.size / r["combinations_per_s"] / 3600
                                           for r in out["runs"]}
    best = max(r["combinations_per_s"] / r["workers"] for r in cl or out["runs"])
    out["EXTRAPOLATED_full_grid_hours_on_64_worker_cores_if_linear"] = sweep.size / (64 * best) / 3600
    print(json.dumps(out, indent=1))
    print("a cluster: 'dask scheduler' on one node, 'dask worker tcp://HEAD:8786 --nworkers auto --nthreads 1' on each "
          "(offloadsim installed), then:")
    print(command())


def _index(row: dict) -> int:
    from planner.sweep import index_of
    return index_of(VARY, row["combo"])


def command() -> str:
    vary = " ".join(f"--vary {k}={','.join(v)}" for k, v in VARY.items())
    return shlex.join(["offloadsim", "whatif", VARY["model"][0], "--machine", MACHINE, "--new-tokens",
                       str(NEW_TOKENS)]) + f" {vary} --scheduler tcp://HEAD:8786 --results sweep-1m.jsonl"


if __name__ == "__main__":
    main()
