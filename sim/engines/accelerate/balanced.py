"""Accelerate's balanced device_map over several GPUs: `device_map="auto"` (or "balanced") with max_memory per GPU.

get_balanced_memory (accelerate/utils/modeling.py): per_gpu = model size // GPUs + a buffer, the buffer
int(1.25 x max(the largest no-split block, the mean size of the leaf modules)); every GPU but the last is capped at
min(per_gpu, its max_memory), the last keeps its max_memory. infer_auto_device_map then fills the devices in order
(GPU 0, 1, ..., the CPU, the disk), never going back; the main devices (GPU 0 and the CPU) keep as a reserve the largest
block still to place.
"""
from __future__ import annotations

from sim.engines.common import blocks_of
from sim.model.shapes import ModelShape


def balanced_memory(model: ModelShape, max_memory: list[int]) -> list[int]:
    """get_balanced_memory's caps for the GPUs (bytes, in device order). The leaves' mean is taken over the units
    (a decoder's linear layers are smaller, so the no-split block, a decoder, is the larger of the two)."""
    n = len(max_memory)
    if n < 2:
        return list(max_memory)
    total = sum(u.nbytes - u.tied_nbytes for u in model.units)
    block = max((sum(model.unit(x).nbytes for x in g) for g in blocks_of(model)
                 if model.unit(g[0]).kind == "decoder"), default=0)
    mean_leaf = total // max(len(model.units), 1)
    per_gpu = total // n + int(1.25 * max(block, mean_leaf))
    return [min(per_gpu, m) for m in max_memory[:-1]] + [max_memory[-1]]


def balanced_map(model: ModelShape, max_memory: list[int], ram_bytes: int) -> dict[str, tuple[str, int]]:
    """infer_auto_device_map over the balanced caps: unit -> (tier, GPU index); the CPU's units 'ram_pageable' and
    the disk's 'disk_raw' (GPU index 0: Accelerate runs them on its execution device, GPU 0)."""
    caps = balanced_memory(model, max_memory)
    groups = blocks_of(model)
    size = [sum(model.unit(n).nbytes - model.unit(n).tied_nbytes for n in g) for g in groups]
    devices = [("vram", g, cap, g == 0) for g, cap in enumerate(caps)] + [("ram_pageable", 0, ram_bytes, True),
                                                                         ("disk_raw", 0, None, False)]
    out, d, used = {}, 0, 0
    for i, g in enumerate(groups):
        reserve = max(size[i + 1:], default=0)
        while devices[d][2] is not None and used + size[i] > devices[d][2] - (reserve if devices[d][3] else 0):
            d, used = d + 1, 0
        for name in g:
            out[name] = (devices[d][0], devices[d][1])
        used += size[i]
    return out


def max_memory_arg(caps: list[int], ram_bytes: int) -> str:
    """The max_memory dictionary to give Accelerate, in GiB."""
    items = [f"{g}: '{c / 2**30:.2f}GiB'" for g, c in enumerate(caps)] + [f"'cpu': '{ram_bytes / 2**30:.2f}GiB'"]
    return "{" + ", ".join(items) + "}"
