"""Do CPU kernels read mapped weights slower than weights in anonymous memory? (lab/journal/peers.md, twenty-third session)

transformers 5 keeps a CPU model's weights as views of a private map of its safetensors file
(`torch.UntypedStorage.from_file(shared=False)`: the pages stay the page cache's, 4 KiB each), and llama.cpp maps its
GGUF shared; offloadsim's CPU grids time weights in anonymous memory (validate/compute_grid.py). Accelerate's CPU maps
ran 20-32% over the grid in peers calls G and H, at every thread count (lab/data/peers/cpu-threads.json). This probe times
a bf16 matrix-vector product over the same bytes held three ways, interleaved over rounds: anonymous memory, a
private map of a file in the page cache, a shared map of it; at every core and at all but two.

    python3 lab/probes/h200_map_gemv_probe.py --out $OUT/map-gemv.json
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch


def gemv_gbps(w: torch.Tensor, x: torch.Tensor, reps: int = 7) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        torch.nn.functional.linear(x, w)
        times.append(time.perf_counter() - t)
    return w.numel() * w.element_size() / statistics.median(times) / 1e9


def held(path: Path, rows: int, cols: int) -> dict[str, torch.Tensor]:
    nbytes = rows * cols * 2
    private = torch.tensor([], dtype=torch.bfloat16).set_(
        torch.UntypedStorage.from_file(str(path), shared=False, nbytes=nbytes)).view(rows, cols)
    fh = open(path, "rb")
    shared_map = mmap.mmap(fh.fileno(), nbytes, prot=mmap.PROT_READ)
    shared = torch.frombuffer(np.frombuffer(shared_map, dtype=np.uint8), dtype=torch.uint8).view(torch.bfloat16)
    return {"anonymous": private.clone(), "private map": private, "shared map": shared.view(rows, cols)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/offloadsim-map-gemv")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    n = os.cpu_count() or 4
    cols = 4096
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "torch": torch.__version__,
           "threads": [n, max(1, n - 2)], "sizes": {}}
    import warnings
    warnings.filterwarnings("ignore", message="The given buffer is not writable")
    for rows in (32768, 131072):  # 256 MiB and 1 GiB
        path = work / f"w{rows}.bin"
        torch.randn(rows * cols, dtype=torch.bfloat16).view(torch.uint8).numpy().tofile(path)
        kinds = held(path, rows, cols)
        x = torch.randn(1, cols, dtype=torch.bfloat16)
        for w in kinds.values():  # first touch: the maps fault their pages in
            gemv_gbps(w, x, 2)
        res = {f"{k} @{t}": [] for k in kinds for t in out["threads"]}
        for _ in range(a.rounds):
            for t in out["threads"]:
                torch.set_num_threads(t)
                for k, w in kinds.items():
                    res[f"{k} @{t}"].append(gemv_gbps(w, x))
        med = {k: statistics.median(v) for k, v in res.items()}
        out["sizes"][f"{rows * cols * 2 >> 20} MiB"] = {"rounds_gbps": res, "median_gbps": med}
        print(rows * cols * 2 >> 20, "MiB", {k: round(v, 1) for k, v in med.items()}, flush=True)
        del kinds
        path.unlink()
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(a.out)


if __name__ == "__main__":
    main()
