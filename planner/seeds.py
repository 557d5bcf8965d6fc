"""Known strong placements as starting points: the planner's result is never worse than any of them.

- KTransformers-style hybrid: every non-expert unit in VRAM, routed experts in RAM computed on the CPU (and a variant
  that fills the VRAM left over with the most used experts).
- llama.cpp `--n-cpu-moe N`: the routed experts of the first N blocks on the CPU, everything else in VRAM, with the
  least N that fits.
- Density: VRAM filled by stall saved per byte; the rest streamed from pinned RAM, or computed on the CPU.
Each is an assignment (OPTIONS indices per unit); the caller finds its loader settings.
"""
from __future__ import annotations

import numpy as np

from planner.evaluator import Evaluator
from planner.choices import OPTIONS
from planner.options import Usage

J = {o: j for j, o in enumerate(OPTIONS)}


def _fill_host(ev: Evaluator, idx: list[int], cpu: bool, pinned_first: bool, reserve: float) -> dict[int, int]:
    """Host options for the units `idx` in order: pinned (if streamed and allowed), pageable, then disk."""
    b = ev.budgets
    ram_left, pin_left = b.ram_bytes - reserve, b.pinned_bytes - reserve
    out = {}
    for i in idx:
        nb = ev.nb[i]
        if pinned_first and not cpu and nb <= min(pin_left, ram_left):
            out[i], pin_left, ram_left = J[("ram_pinned", "gpu")], pin_left - nb, ram_left - nb
        elif nb <= ram_left:
            out[i], ram_left = J[("ram_pageable", "cpu" if cpu else "gpu")], ram_left - nb
        else:
            out[i] = J[("disk_raw", "cpu" if cpu else "gpu")]
    return out


def _vram_room(ev: Evaluator, slots: int) -> float:
    return ev.budgets.vram_bytes - ev.fixed_vram - slots * ev.nb.max()


def ktransformers(ev: Evaluator, use: Usage) -> list[np.ndarray]:
    """Non-experts in VRAM (most used first while they fit; the rest streamed), routed experts on the CPU from RAM;
    the second variant also puts the most used experts in the VRAM that is left."""
    if not ev.is_expert.any():
        return []
    n = len(ev.nb)
    order = sorted(range(n), key=lambda i: (-use.uses[i], i))
    dense = [i for i in order if not ev.is_expert[i]]
    experts = [i for i in order if ev.is_expert[i]]
    room = ev.budgets.vram_bytes - ev.fixed_vram
    a = np.full(n, -1, dtype=np.int64)
    streamed = []
    for i in dense:
        if ev.nb[i] <= room:
            a[i], room = J[("vram", "gpu")], room - ev.nb[i]
        else:
            streamed.append(i)
    if streamed:  # staging for the streamed non-experts
        room -= 2 * max(ev.nb[i] for i in streamed)
        if room < 0:
            return []
    reserve = 2 * max(ev.nb[i] for i in streamed) if streamed else 0.0
    for i, j in _fill_host(ev, streamed, False, True, reserve).items():
        a[i] = j
    out = []
    host = _fill_host(ev, experts, True, False, reserve + sum(ev.nb[i] for i in streamed))
    base = a.copy()
    for i, j in host.items():
        base[i] = j
    out.append(base)
    extra, left = base.copy(), room
    for i in experts:
        if ev.nb[i] <= left:
            extra[i], left = J[("vram", "gpu")], left - ev.nb[i]
    out.append(extra)
    return out


def n_cpu_moe(ev: Evaluator) -> list[np.ndarray]:
    """llama.cpp --n-cpu-moe N: experts of blocks < N on the CPU (RAM, then disk), all else in VRAM; least N."""
    if not ev.is_expert.any():
        return []
    blocks = np.array([u.block for u in ev.model.units])
    room = ev.budgets.vram_bytes - ev.fixed_vram
    for cut in sorted(set(blocks[ev.is_expert].tolist())) + [int(blocks.max()) + 1]:
        on_cpu = ev.is_expert & (blocks < cut)
        if ev.nb[~on_cpu].sum() <= room:
            a = np.full(len(ev.nb), J[("vram", "gpu")], dtype=np.int64)
            for i, j in _fill_host(ev, np.flatnonzero(on_cpu).tolist(), True, False, 0.0).items():
                a[i] = j
            return [a]
    return []


def density(ev: Evaluator, use: Usage) -> list[np.ndarray]:
    """VRAM by stall saved per byte (a streamed unit's copy time, or its CPU time over its GPU time, per use);
    the rest streamed from pinned RAM, or computed on the CPU where that is cheaper per unit."""
    link = ev.machine.link
    copy_s = use.uses * ev.nb / link.pinned_h2d_bytes_per_s
    cpu_extra = np.maximum(use.cpu_s - use.gpu_s, 0)
    gain = np.minimum(copy_s, cpu_extra)
    order = sorted(range(len(ev.nb)), key=lambda i: (-gain[i] / max(ev.nb[i], 1), i))
    out = []
    for cpu_rest in (False, True):
        slots = 0 if cpu_rest else 2
        room = _vram_room(ev, slots)
        a = np.full(len(ev.nb), -1, dtype=np.int64)
        rest = []
        for i in order:
            if ev.nb[i] <= room:
                a[i], room = J[("vram", "gpu")], room - ev.nb[i]
            else:
                rest.append(i)
        cheaper_cpu = [i for i in rest if cpu_rest and cpu_extra[i] <= copy_s[i]]
        on_cpu = set(cheaper_cpu)
        streamed = [i for i in rest if i not in on_cpu]
        reserve = 2 * ev.nb.max() if streamed else 0.0
        for i, j in _fill_host(ev, streamed, False, True, reserve).items():
            a[i] = j
        for i, j in _fill_host(ev, cheaper_cpu, True, False, reserve + sum(ev.nb[i] for i in streamed)).items():
            a[i] = j
        out.append(a)
    return out


def known_placements(ev: Evaluator, use: Usage) -> dict[str, np.ndarray]:
    """Name -> assignment for every known placement that applies to this model."""
    out: dict[str, np.ndarray] = {}
    for name, plans in (("ktransformers", ktransformers(ev, use)), ("n-cpu-moe", n_cpu_moe(ev)),
                        ("density-stall", density(ev, use))):
        for k, a in enumerate(plans):
            out[f"{name}-{k}" if len(plans) > 1 else name] = a
    return out
