"""Do CPU layers read their weights faster from huge pages? (lab/journal/validation.md, calls N and O)

The CPU grids time layers whose weights sit in numpy-allocated buffers (validate/compute_grid.py, random_blobs;
numpy asks the kernel for transparent huge pages on large arrays), the engine's plans read them from torch.empty
buffers filled from the layer store (4 KiB pages unless asked). Qwen3-8B's CPU layers ran up to 1.5-2x their grid in
calls N and O while a probe with grid-like buffers found plan = grid (lab/data/validation/probes/cpu-long-*.json). This
probe multiplies a batch of 1, 4 and 8 tokens by four 390 MB bf16 weight matrices held three ways, interleaved:
torch.empty; numpy (np.empty, then torch.from_numpy); torch.empty with madvise(MADV_HUGEPAGE) before the first touch.

    python3 lab/probes/h200_thp_probe.py --out $OUT/thp.json
"""
from __future__ import annotations

import argparse
import ctypes
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

MADV_HUGEPAGE = 14
HUGE = 2 * 1024 * 1024


def anon_huge_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return -1


def madvised(nbytes: int) -> torch.Tensor:
    """A uint8 tensor of `nbytes` whose 2 MiB-aligned interior is marked MADV_HUGEPAGE before its first touch."""
    buf = torch.empty(nbytes + HUGE, dtype=torch.uint8)
    start = (buf.data_ptr() + HUGE - 1) // HUGE * HUGE
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    rc = libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(nbytes // HUGE * HUGE), MADV_HUGEPAGE)
    off = start - buf.data_ptr()
    out = buf[off:off + nbytes]
    out.fill_(0)
    return out if rc == 0 else out.clone()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=47616)  # 47616 x 4096 x 2 bytes = 390 MB, a Qwen3-8B decoder
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(max(1, (torch.get_num_threads() or 2) - 2))
    cols, layers = 4096, 4
    nbytes = a.rows * cols * 2
    src = torch.randn(a.rows, cols, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(0))
    kinds = {}
    for kind in ("torch.empty", "numpy", "madvise"):
        before = anon_huge_kib()
        bufs = []
        for _ in range(layers):
            raw = torch.empty(nbytes, dtype=torch.uint8) if kind == "torch.empty" else \
                torch.from_numpy(np.empty(nbytes, dtype=np.uint8)) if kind == "numpy" else madvised(nbytes)
            w = raw.view(torch.bfloat16).view(a.rows, cols)
            w.copy_(src)
            bufs.append(w)
        kinds[kind] = {"weights": bufs, "anon_huge_mib_added": (anon_huge_kib() - before) / 1024}
    out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
           "torch": torch.__version__, "threads": torch.get_num_threads(), "bytes_per_layer": nbytes,
           "anon_huge_mib_added": {k: v["anon_huge_mib_added"] for k, v in kinds.items()}, "rows": []}
    print(json.dumps(out["anon_huge_mib_added"]), flush=True)
    for r in range(a.rounds):
        for batch in (1, 4, 8):
            x = torch.randn(batch, cols, dtype=torch.bfloat16)
            for kind, v in kinds.items():
                for w in v["weights"]:
                    F.linear(x, w)
                times = []
                for _ in range(3):
                    for w in v["weights"]:
                        t = time.perf_counter()
                        F.linear(x, w)
                        times.append(time.perf_counter() - t)
                row = {"round": r, "batch": batch, "memory": kind, "ms": 1e3 * statistics.median(times),
                       "GB_per_s": nbytes / statistics.median(times) / 1e9}
                out["rows"].append(row)
                print(json.dumps(row), flush=True)
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
