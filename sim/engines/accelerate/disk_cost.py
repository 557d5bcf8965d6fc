"""What Accelerate's disk offload pays per tensor at every forward (`calibrate --peer accelerate`): the safetensors
file opened, its header parsed and the tensor mapped anew. torch is imported by the function that times it."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

MiB = 2**20


def safetensors_tensor_s(folder: Path, tensors: int = 64, nbytes: int = MiB, passes: int = 3) -> float:
    """Seconds per tensor that Accelerate's disk offload pays at every forward beyond the pages' map cost
    (host_memory.map_touch_bytes_per_s): accelerate/utils/offload.py OffloadedWeightsLoader opens the safetensors
    file and parses its header for each tensor, and get_tensor returns a view of a fresh private map of the whole
    file, unmapped when the hook frees the weight. Timed as that, the view summed by torch's threads and released,
    less the same sum of a tensor already in memory; median over `passes` passes of a file of `tensors` tensors."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    path = folder / ".calib-offload.safetensors"
    save_file({f"t{i}": torch.ones(nbytes // 2, dtype=torch.bfloat16) for i in range(tensors)}, str(path))
    try:
        resident = torch.ones(nbytes // 2, dtype=torch.bfloat16)
        times = []
        for _ in range(passes):
            for i in range(tensors):
                t = time.perf_counter()
                with safe_open(str(path), framework="pt", device="cpu") as f:
                    w = f.get_tensor(f"t{i}")
                float(w.sum())
                del w
                mid = time.perf_counter()
                float(resident.sum())
                times.append((mid - t) - (time.perf_counter() - mid))
        return max(float(np.median(times)), 0.0)
    finally:
        path.unlink(missing_ok=True)


def offload_open(folder: Path, sizes: tuple[int, ...] = (16, 64, 256), rounds: int = 3,
                 timer=safetensors_tensor_s) -> tuple[float, float]:
    """(seconds per tensor, seconds per header entry of its file): the per-tensor open timed on files of `sizes`
    tensors, interleaved over `rounds` (the host's speed drifts within minutes), as a line in the header's size (its
    JSON is parsed at every open), fitted by Theil-Sen (one slow pass cannot tilt it: one line from two files, as
    before, measured 2.03 us an entry in lab/data/peers/peers-n.json against 0.65-1.21 in peers-{j..r}.json)."""
    from scipy.stats import theilslopes
    points = [(n, timer(folder, n, passes=1)) for _ in range(rounds) for n in sizes]
    slope, intercept = theilslopes([t for _, t in points], [n for n, _ in points])[:2]
    slope = max(float(slope), 0.0)
    return max(float(intercept) if slope > 0 else float(np.median([t for _, t in points])), 0.0), slope
