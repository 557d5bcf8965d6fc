"""Do CPU kernels stream weights slower when they do not start on a cache line? (lab/journal/peers.md, twenty-third session)

transformers 5 keeps a CPU model's weights as views into its safetensors file (lab/probes/h200_map_gemv_probe.py),
where tensor data starts 8 + the header's length bytes in: a random-weight checkpoint's matrices all sat 16 bytes
past a 64-byte line, so every 64-byte vector load of a GEMV spans two lines. offloadsim's CPU grids time aligned
weights. This probe times a bf16 matrix-vector product over the same bytes at offsets of 0, 8, 16, 32 and 64 bytes
from a line, interleaved over rounds, at every core.

    python3 lab/probes/h200_align_probe.py --out $OUT/align.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from lab.probes.h200_map_gemv_probe import gemv_gbps


def at_offset(src: torch.Tensor, offset: int) -> torch.Tensor:
    """A copy of the 2-D bf16 `src` whose data starts `offset` bytes past a 64-byte boundary."""
    flat = torch.empty(src.numel() * 2 + 128, dtype=torch.uint8)
    start = (-flat.data_ptr()) % 64 + offset
    out = flat[start:start + src.numel() * 2].view(torch.bfloat16).view(src.shape)
    out.copy_(src)
    assert out.data_ptr() % 64 == offset % 64
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    offsets = (0, 8, 16, 32, 64)
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "torch": torch.__version__,
           "threads": os.cpu_count(), "offsets": offsets, "sizes": {}}
    torch.set_num_threads(os.cpu_count() or 4)
    for rows in (32768, 131072):  # 256 MiB and 1 GiB of a 4096-wide matrix
        src = torch.randn(rows, 4096, dtype=torch.bfloat16)
        ws = {o: at_offset(src, o) for o in offsets}
        del src
        x = torch.randn(1, 4096, dtype=torch.bfloat16)
        res = {str(o): [] for o in offsets}
        for _ in range(a.rounds):
            for o, w in ws.items():
                res[str(o)].append(gemv_gbps(w, x))
        med = {o: statistics.median(v) for o, v in res.items()}
        out["sizes"][f"{rows * 4096 * 2 >> 20} MiB"] = {"rounds_gbps": res, "median_gbps": med}
        print(rows * 4096 * 2 >> 20, "MiB", {o: round(v, 1) for o, v in med.items()}, "GB/s", flush=True)
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(a.out)


if __name__ == "__main__":
    main()
