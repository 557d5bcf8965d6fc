"""Why host-side speeds move between runs on the H200 host: transparent huge pages or NUMA placement?

The matrix of calls G and H left two host-side misses (lab/journal/validation.md): pageable host-to-device copies cluster
around two speeds by run (6.1-6.8 and 7.8-9.3 GB/s), and CPU-computed layers read their weights ~30% faster from
pinned than from pageable memory. Both follow if some buffers are backed by 2 MiB pages and others by 4 KiB pages
(the driver's staging copy and a CPU GEMV both walk the pages), or if buffers land on different NUMA nodes.

This probe records the topology and THP policy, then for each way of allocating a host buffer (torch's allocator,
an anonymous map advised MADV_HUGEPAGE, one advised MADV_NOHUGEPAGE, pinned) allocates several fresh buffers and
times, per buffer: a pageable host-to-device copy and a CPU matrix-vector product reading the buffer as bf16
weights. With more than one NUMA node it repeats the copies with the process bound to each node's cores.

    python3 lab/probes/h200_host_probe.py --out $OUT/host-probe.json
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

MiB = 1024 * 1024


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        return f"unreadable: {exc}"


def topology() -> dict:
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    out = {"thp_enabled": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
           "thp_defrag": _read("/sys/kernel/mm/transparent_hugepage/defrag"),
           "nodes": {n.name: _read(str(n / "cpulist")) for n in nodes},
           "nproc": os.cpu_count(), "affinity": sorted(os.sched_getaffinity(0))}
    try:
        bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().lower()
        bus = re.sub(r"^0000(\w{4})", r"\1", bus)[-12:]
        out["gpu_bus"] = bus
        out["gpu_numa_node"] = _read(f"/sys/bus/pci/devices/{bus}/numa_node")
    except (OSError, subprocess.SubprocessError) as exc:
        out["gpu_numa_node"] = f"unknown: {exc}"
    out["lscpu"] = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return out


def anon_huge_kib() -> int:
    m = re.search(r"AnonHugePages:\s+(\d+)", _read("/proc/self/smaps_rollup"))
    return int(m.group(1)) if m else -1


def alloc(kind: str, nbytes: int):
    """A filled host buffer of `nbytes` and the object that keeps its memory alive."""
    if kind == "torch":
        t = torch.empty(nbytes, dtype=torch.uint8)
        keep = t
    elif kind == "pinned":
        t = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        keep = t
    else:
        m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        m.madvise(mmap.MADV_HUGEPAGE if kind == "mmap_huge" else mmap.MADV_NOHUGEPAGE)
        t = torch.frombuffer(m, dtype=torch.uint8)
        keep = (m, t)
    t.fill_(1)
    return t, keep


def per_buffer(kind: str, nbytes: int, count: int, rows: int) -> list[dict]:
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    x = torch.ones(1, rows, dtype=torch.bfloat16)
    out = []
    for _ in range(count):
        before = anon_huge_kib()
        buf, keep = alloc(kind, nbytes)
        huge = anon_huge_kib() - before
        times = []
        for _ in range(4):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dev.copy_(buf)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        w = buf.view(torch.bfloat16).view(rows, -1)
        x @ w  # first touch of the product's own buffers
        mv = []
        for _ in range(4):
            t0 = time.perf_counter()
            x @ w
            mv.append(time.perf_counter() - t0)
        out.append({"copy_GBps": nbytes / float(np.median(times[1:])) / 1e9,
                    "copy_first_GBps": nbytes / times[0] / 1e9,
                    "gemv_GBps": nbytes / float(np.median(mv[1:])) / 1e9, "anon_huge_MiB": huge / 1024})
        del buf, keep, w
    return out


def per_node(nbytes: int, nodes: dict) -> dict:
    out = {}
    full = os.sched_getaffinity(0)
    for name, cpus in nodes.items():
        cpuset = set()
        for part in cpus.split(","):
            if "-" in part:
                a, b = part.split("-")
                cpuset.update(range(int(a), int(b) + 1))
            elif part:
                cpuset.add(int(part))
        if not cpuset:
            continue
        os.sched_setaffinity(0, cpuset)
        out[name] = per_buffer("torch", nbytes, 3, 4096)
        os.sched_setaffinity(0, full)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--count", type=int, default=6)
    args = ap.parse_args()
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    nbytes = args.mib * MiB
    res = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "nbytes": nbytes, "topology": topology(), "kinds": {}}
    for kind in ("torch", "mmap_huge", "mmap_nohuge", "pinned"):
        t0 = time.perf_counter()
        res["kinds"][kind] = per_buffer(kind, nbytes, args.count, 4096)
        print(kind, f"{time.perf_counter() - t0:.1f}s",
              [(round(r["copy_GBps"], 2), round(r["gemv_GBps"], 1), round(r["anon_huge_MiB"])) for r in res["kinds"][kind]],
              flush=True)
    if len(res["topology"]["nodes"]) > 1:
        res["per_node"] = per_node(nbytes, res["topology"]["nodes"])
        print("per node", json.dumps(res["per_node"]), flush=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res["topology"].items() if k != "lscpu"}), flush=True)


if __name__ == "__main__":
    main()
