"""llama.cpp's layer split over several GPUs (--split-mode layer, -ts), as src/llama-model.cpp computes it.

llama.cpp numbers its layers 0..n_layer-1 and the output as layer n_layer; the input (token embedding) always stays on
the CPU. With -ngl N the last N layers (the output counted) go to the GPUs: i_gpu_start = max(n_layer + 1 - N, 0),
act_gpu_layers = min(N, n_layer + 1). The split -ts (default: each device's free memory) becomes a running sum
normalised to 1, `splits`, and layer il goes to device upper_bound(splits, float(il - i_gpu_start) / act_gpu_layers):
the first device whose running share exceeds the layer's position (all in 32-bit float, as llama.cpp computes it).
"""
from __future__ import annotations

import bisect

import numpy as np

from hwmodels.units import InputError


def cumulative_splits(tensor_split: list[float]) -> list[float]:
    """llama.cpp's `splits`: the running sum of -ts, divided by its total (float32)."""
    if not tensor_split or any(x < 0 for x in tensor_split) or sum(tensor_split) <= 0:
        raise InputError(f"tensor split: {tensor_split!r} is not a list of non-negative shares with a positive sum; "
                         "give e.g. 1,1.")
    acc = np.cumsum(np.asarray(tensor_split, dtype=np.float32), dtype=np.float32)
    return (acc / acc[-1]).astype(np.float32).tolist()


def layer_devices(n_layer: int, n_gpu_layers: int, tensor_split: list[float]) -> list[int | None]:
    """The device of each of llama.cpp's layers 0..n_layer (the last is the output): a GPU index, or None for the
    CPU."""
    splits = cumulative_splits(tensor_split)
    start = max(n_layer + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer + 1)
    out: list[int | None] = []
    for il in range(n_layer + 1):
        if il < start or il - start >= act:
            out.append(None)
            continue
        x = float(np.float32(il - start) / np.float32(act))
        out.append(min(bisect.bisect_right(splits, x), len(splits) - 1))
    return out


def split_args(n_gpu_layers: int, tensor_split: list[float]) -> str:
    """The llama.cpp arguments of a split: `-ngl N --split-mode layer -ts a,b`."""
    shares = ",".join(f"{x:g}" for x in tensor_split)
    return f"-ngl {n_gpu_layers} --split-mode layer -ts {shares}"
