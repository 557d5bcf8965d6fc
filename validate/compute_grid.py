"""Measure compute grids: each unit kind of one architecture timed inside the engine, as the engine runs it.

A few-layer copy of the model (same shapes, random weights, in memory) runs on the engine for every batch x prompt
length of the grid, all resident on the GPU (or all on the CPU from RAM). A unit's time is the gap between the end of
the compute before it and its own end, so dispatch, per-unit bookkeeping and synchronisation are included exactly as
a real run pays them. Prefill gives time by (batch, prompt); the decode steps after it time by (batch, context), where context is the static cache the engine attends over at
every decode step (prompt + new tokens - 1).
"""
from __future__ import annotations

import datetime
import platform
from collections import defaultdict

import numpy as np
import torch

from hwmodels.profiles import ComputeGrid
from hwmodels.specs import MachineSpec
from validate.store import _blob, _layout
from sim.model.families import shape_from_config
from sim.plan import Workload
from sim.engines.common import make_plan
from validate.engine import Engine
from sim.costs.compute import signature

KINDS = ("embedding", "decoder", "lm_head")


def unit_tensor_shapes(config: dict, kind: str) -> dict[str, tuple[int, ...]]:
    """Tensor names (relative to the unit, as the layer store keeps them) and shapes of one unit of a dense model."""
    h, v = config["hidden_size"], config["vocab_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    d = config.get("head_dim") or h // heads
    if kind == "embedding":
        return {"weight": (v, h)}
    if kind == "lm_head":
        return {"model.norm.weight": (h,), "lm_head.weight": (v, h)}
    inter = config["intermediate_size"]
    out = {"input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
           "self_attn.q_proj.weight": (heads * d, h), "self_attn.k_proj.weight": (kv * d, h),
           "self_attn.v_proj.weight": (kv * d, h), "self_attn.o_proj.weight": (h, heads * d),
           "mlp.gate_proj.weight": (inter, h), "mlp.up_proj.weight": (inter, h), "mlp.down_proj.weight": (h, inter)}
    if config.get("model_type") == "qwen3":
        out.update({"self_attn.q_norm.weight": (d,), "self_attn.k_norm.weight": (d,)})
    if config.get("attention_bias") or config.get("model_type") == "qwen2":
        out.update({"self_attn.q_proj.bias": (heads * d,), "self_attn.k_proj.bias": (kv * d,),
                    "self_attn.v_proj.bias": (kv * d,)})
    return out


def random_tensors(config: dict, shape, gen_device: str) -> dict[str, dict[str, torch.Tensor]]:
    """unit -> {tensor name: random bf16 host tensor} (std 0.02; norms near 1)."""
    out = {}
    g = torch.Generator(device=gen_device).manual_seed(0)
    for u in shape.units:
        tensors = {}
        for name, shp in unit_tensor_shapes(config, u.kind).items():
            t = torch.randn(shp, generator=g, device=gen_device, dtype=torch.float32)
            tensors[name] = ((1.0 + 0.02 * t) if len(shp) == 1 else 0.02 * t).to(torch.bfloat16).cpu()
        out[u.name] = tensors
    return out


def random_blobs(config: dict, shape, gen_device: str) -> dict[str, tuple[torch.Tensor, list[dict]]]:
    """unit -> (flat uint8 host tensor, layout), as the layer store would hold it."""
    out = {}
    for name, tensors in random_tensors(config, shape, gen_device).items():
        layout, size = _layout(tensors)
        out[name] = (torch.from_numpy(_blob(tensors, layout, size)), layout)
    return out


def unit_times(events, kinds: dict[str, str]) -> dict[tuple[int, str], list[float]]:
    """(step, kind) -> per-unit seconds, each the gap from the previous compute end (or its own start) to its end."""
    comps = sorted((e for e in events if e.stage == "compute"), key=lambda e: (e.token, e.end_s))
    out: dict[tuple[int, str], list[float]] = defaultdict(list)
    prev: dict[int, float] = {}
    for e in comps:
        t0 = prev.get(e.token, e.start_s)
        out[(e.token, kinds[e.unit])].append(max(e.end_s - max(t0, 0.0), 1e-9))
        prev[e.token] = e.end_s
    return out


def measure_grids(config: dict, machine: MachineSpec, device: str, batches=(1, 4, 16), prompts=(32, 512, 2048),
                  layers: int = 3, new_tokens: int = 5, progress=None, graphs: bool = True,
                  memory: str = "pageable", contexts: tuple[int, ...] = ()) -> list[ComputeGrid]:
    """Grids for embedding, decoder and head of `config`'s architecture on `device` ('gpu' or 'cpu'), launched as
    CUDA graphs per unit (`graphs`, as offloadsim's engine runs on a GPU) or eagerly (as the peers run). On the CPU
    the weights sit in `memory` ('pageable' or 'pinned' RAM: on the H200 host a CPU layer read pinned weights up to
    30% faster, lab/journal/validation.md). `contexts` (CPU with a GPU only): longer prompts whose decode steps extend the
    decode axis, their prefill multiplied on the GPU as the engine does for a big step, so a long cache costs
    seconds, not the minutes a CPU prefill of it would (the CPU's attention over a long cache was unmeasured and
    cost a Qwen3-8B layer 4x its short-context time, lab/data/validation/matrix/matrix-m.json)."""
    if contexts and min(contexts) <= max(batches):
        raise ValueError(f"contexts: {min(contexts)} must exceed the largest batch {max(batches)} (the prompt "
                         "offloads, the decode steps stay on the CPU); give longer contexts.")
    cuda = torch.cuda.is_available()
    prompts = tuple(prompts)
    cfg = dict(config, num_hidden_layers=layers)
    cfg.pop("rope_scaling", None)
    shape = shape_from_config(cfg)
    blobs = random_blobs(cfg, shape, "cuda" if cuda else "cpu")
    names = [u.name for u in shape.units]
    on_cpu = device == "cpu"
    pinned = on_cpu and memory == "pinned" and cuda
    plan = make_plan(shape, machine, "calibrate", {n: ("ram_pinned" if pinned else "ram_pageable") if on_cpu else "vram"
                                                   for n in names},
                     {n: "cpu" for n in names} if on_cpu else None)
    engine = Engine(None, cfg, shape, plan, machine, blobs=blobs, graphs=graphs)
    dispatch = "graph" if graphs and cuda and not on_cpu else "eager"
    kinds = {u.name: u.kind for u in shape.units}
    engine.run(Workload(batch=1, prompt_tokens=min(prompts), new_tokens=3))  # warm-up: handles, allocator, caches
    contexts = tuple(contexts) if on_cpu and cuda else ()
    long_engine = Engine(None, cfg, shape, plan.model_copy(update={"gpu_offload_min_tokens": max(batches) + 1}),
                         machine, blobs=blobs, graphs=graphs) if contexts else None
    pre = {k: np.zeros((len(batches), len(prompts))) for k in KINDS}
    dec = {k: np.zeros((len(batches), len(prompts) + len(contexts))) for k in KINDS}
    for bi, b in enumerate(batches):
        for pi, p in enumerate(prompts + contexts):
            run = (engine if pi < len(prompts) else long_engine).run(
                Workload(batch=b, prompt_tokens=p, new_tokens=new_tokens))
            times = unit_times(run.events, kinds)
            for k in KINDS:
                if pi < len(prompts):
                    pre[k][bi, pi] = float(np.median(times[(0, k)]))
                dec[k][bi, pi] = float(np.median([t for s in range(1, new_tokens) for t in times[(s, k)]]))
            if progress:
                progress(f"{device} {dispatch}{' pinned' if pinned else ''} b{b} p{p}")
    where = f", weights in {'pinned' if pinned else 'pageable'} RAM" if on_cpu else ""
    src = (f"[M] offloadsim calibrate on {platform.node()}, {datetime.date.today()}: engine run of a {layers}-layer "
           f"copy, per-unit end-to-end gaps ({dispatch}{where}), median over layers and steps; torch {torch.__version__}")
    family = shape.family
    out = []
    for u in shape.units:
        if u.kind not in KINDS or any(g.unit.kind == u.kind for g in out):
            continue
        out.append(ComputeGrid(unit=signature(u, family), device=device, dispatch=dispatch,
                               memory=("pinned" if pinned else "pageable") if on_cpu else "vram", batch=tuple(batches),
                               prefill_tokens=tuple(prompts), prefill_s=tuple(map(tuple, pre[u.kind].tolist())),
                               decode_context=tuple(p + new_tokens - 1 for p in prompts + contexts),
                               decode_s=tuple(map(tuple, dec[u.kind].tolist())),
                               source=src))
    return out


def median_grids(rounds: list[list[ComputeGrid]]) -> list[ComputeGrid]:
    """Grids timed in several rounds (the same units, device, dispatch and memory in each) -> one grid per unit:
    every point the median over the rounds, `spread` the median over points of (slowest - fastest) / median. The
    host's CPU speed drifts by tens of percent within minutes (lab/journal/validation.md), so a single round is a snapshot."""
    out = []
    for i, first in enumerate(rounds[0]):
        same = [r[i] for r in rounds]
        if any((g.unit, g.device, g.dispatch, g.memory) != (first.unit, first.device, first.dispatch, first.memory)
               for g in same):
            raise ValueError("median_grids: the rounds must time the same grids in the same order")
        pre = np.array([g.prefill_s for g in same])
        dec = np.array([g.decode_s for g in same])
        both = np.concatenate([pre.reshape(len(same), -1), dec.reshape(len(same), -1)], axis=1)
        spread = float(np.median((both.max(0) - both.min(0)) / np.median(both, 0)))
        out.append(first.model_copy(update={
            "prefill_s": tuple(map(tuple, np.median(pre, 0).tolist())),
            "decode_s": tuple(map(tuple, np.median(dec, 0).tolist())), "spread": spread,
            "source": f"{first.source}; median of {len(same)} interleaved rounds (spread {spread:.1%})"}))
    return out
