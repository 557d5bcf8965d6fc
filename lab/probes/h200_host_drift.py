"""Does the H200 host's memory bandwidth drift over time? A time series of DRAM-bound and cache-bound host work.

The matrix calls I and J left their largest misses on host work that streams from DRAM: CPU layers larger than the
300 MiB L3 (Llama-8B, Qwen3-14B: one grid measured seconds after another differed by up to 58%), pageable copies
and unpacking, while CPU layers that fit in L3 (Llama-1B, Qwen3-4B) reproduced within 5%. If the lent VM shares
DRAM bandwidth with other tenants, DRAM-bound work should drift and L3-bound work should not.

For `--seconds`, in rounds: a bf16 matrix-vector product over 1 GiB of weights (DRAM-bound) and over 96 MiB
(L3-resident) with the engine's CPU thread count, a 1 GiB host memcpy, and a 256 MiB pageable host-to-device copy.
Prints each series' median, spread (max/min - 1) and coefficient of variation.

    python3 lab/probes/h200_host_drift.py --out $OUT/host-drift.json --seconds 60
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

MiB = 1024 * 1024


def timer(fn, sync: bool) -> float:
    if sync:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if sync:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 3) - 2))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cuda = torch.cuda.is_available()
    rows = 4096
    big = torch.full((rows, 1024 * MiB // 2 // rows), 0.01, dtype=torch.bfloat16)
    small = torch.full((rows, 96 * MiB // 2 // rows), 0.01, dtype=torch.bfloat16)
    x = torch.ones(1, rows, dtype=torch.bfloat16)
    src, dst = torch.ones(1024 * MiB, dtype=torch.uint8), torch.empty(1024 * MiB, dtype=torch.uint8)
    host = torch.ones(256 * MiB, dtype=torch.uint8)
    dev = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda") if cuda else None
    work = {"gemv_1GiB_GBps": (lambda: x @ big, big.numel() * 2, False),
            "gemv_96MiB_GBps": (lambda: [x @ small for _ in range(4)], 4 * small.numel() * 2, False),
            "memcpy_1GiB_GBps": (lambda: dst.copy_(src), 2 * 1024 * MiB, False)}
    if cuda:
        work["h2d_pageable_256MiB_GBps"] = (lambda: dev.copy_(host), 256 * MiB, True)
    for fn, _, sync in work.values():  # first touch, thread pool
        timer(fn, sync)
    series: dict[str, list] = {k: [] for k in work}
    t_start = time.perf_counter()
    stamps = []
    while time.perf_counter() - t_start < a.seconds:
        stamps.append(time.perf_counter() - t_start)
        for k, (fn, nbytes, sync) in work.items():
            series[k].append(nbytes / timer(fn, sync) / 1e9)
        time.sleep(0.2)
    out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": os.uname().nodename,
           "torch": torch.__version__, "threads": a.threads, "seconds": a.seconds, "t_s": stamps, "series": series,
           "summary": {}}
    for k, v in series.items():
        v = np.asarray(v)
        out["summary"][k] = {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
                             "spread_pct": float(100 * (v.max() / v.min() - 1)), "cv_pct": float(100 * v.std() / v.mean()),
                             "rounds": len(v)}
        print(k, {kk: round(vv, 2) for kk, vv in out["summary"][k].items()}, flush=True)
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(a.out)


if __name__ == "__main__":
    main()
