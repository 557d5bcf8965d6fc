"""The host's mapped page-cache read speed (host_memory.map_touch_bytes_per_s) as calibrate measures it, on a 1 GiB
and a 4 GiB file, plus the speed of Accelerate's own path: one np.memmap per tensor-sized slice (436 MB, a Llama-8B
layer, in 8 pieces), each summed by torch on the CPU (bf16 view) against the same bytes already in memory.
Run (H200): python lab/probes/h200_map_touch.py --out $OUT/map-touch.json
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    from validate.calibrate_host import map_touch
    out = {"host": os.uname().nodename, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    for gib in (1, 4):
        n = gib * 2**30
        fd, name = tempfile.mkstemp(dir="/tmp")
        path = Path(name)
        with os.fdopen(fd, "wb") as fh:
            for _ in range(gib * 4):
                fh.write(np.random.default_rng(0).integers(0, 255, 2**28, dtype=np.uint8).tobytes())
        with open(path, "rb") as fh:  # into the page cache
            while fh.read(2**26):
                pass
        out[f"map_touch_{gib}GiB_bytes_per_s"] = map_touch(path, n)
        layer, pieces = 436_224_000, 8  # bytes divisible by 2 x pieces
        mem = torch.from_numpy(np.fromfile(path, dtype=np.uint8, count=layer)).view(torch.bfloat16)
        float(mem.sum())
        t = time.perf_counter()
        float(mem.sum())
        plain = time.perf_counter() - t
        t = time.perf_counter()
        for k in range(pieces):  # Accelerate: a fresh memmap per tensor, then used in place
            m = np.memmap(path, dtype=np.uint8, mode="r", offset=k * layer // pieces, shape=(layer // pieces,))
            float(torch.from_numpy(np.asarray(m)).view(torch.bfloat16).sum())
            del m
        mapped = time.perf_counter() - t
        out[f"layer_sum_in_memory_s_{gib}GiB"] = plain
        out[f"layer_sum_mapped_s_{gib}GiB"] = mapped
        path.unlink()
        print(gib, json.dumps(out), flush=True)
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
