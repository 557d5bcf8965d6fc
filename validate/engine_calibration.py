"""Stage speeds and the engine's own per-item cost, timed inside the engine as it streams (calibrate's last step).

Microbenchmarks time a copy, a read or a decode alone; the engine runs them beside each other and beside compute,
from its own buffers. So calibrate also streams a two-layer model of the real layer shapes (small vocabulary) through
the engine from each tier and reads the stage speeds off the event records: pinned and pageable copy speed at the
unit's size, page-cache and cold read speed, decode speed per thread. The per-item host cost (thread hand-offs,
bookkeeping) is fitted on a tiny model of the same family, where copies take microseconds and that cost shows:
(measured time per token - the simulator's prediction without it) / streamed items per token.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

from hwmodels.specs import MachineSpec
from sim.model.families import shape_from_config
from validate.compute_grid import random_tensors
from validate.store import write_store
from sim.engines.common import make_plan
from validate.engine import Engine
from sim.costs.equations import machine_codec, unpack_time_s
from sim.plan import Budgets
from sim.run.simulate import simulate
from validate.compute_grid import measure_grids

TIERS = ("ram_pinned", "ram_pageable", "ram_compressed", "disk_raw")


def _model(config: dict, folder: Path, **over):
    cfg = dict(config, **over)
    cfg.pop("rope_scaling", None)
    shape = shape_from_config(cfg)
    shutil.rmtree(folder, ignore_errors=True)
    write_store(random_tensors(cfg, shape, "cuda" if torch.cuda.is_available() else "cpu").items(), folder,
                compress=True, threads=8)
    return cfg, shape


def _plan(shape, machine: MachineSpec, tier: str | None):
    tiers = {u.name: (tier if tier and u.kind == "decoder" else "vram") for u in shape.units}
    return make_plan(shape, machine, f"calibrate-{tier or 'resident'}", tiers, prefetch_depth=2, vram_slots=3,
                     pinned_slots=3, codec=machine_codec(machine))


def _run(store: Path, cfg, shape, plan, machine, w, cold: bool = False):
    engine = Engine(store, cfg, shape, plan, machine)
    engine.run(w)  # warm-up: kernels, allocator, page cache
    if cold:
        engine.drop_page_cache()
    return engine.run(w, cold=cold)


def _median(values) -> float:
    return float(np.median(values)) if len(values) else float("nan")


def stage_speeds(config: dict, machine: MachineSpec, folder: Path, w) -> dict:
    """Copy, read and decode speeds of decoder units streamed by the engine (decode steps; cold reads: step 0)."""
    cfg, shape = _model(config, folder, num_hidden_layers=2, vocab_size=1024)
    dec = {u.name: u.nbytes for u in shape.units if u.kind == "decoder"}
    out: dict = {"unit_nbytes": int(max(dec.values()))}
    runs = {t: _run(folder, cfg, shape, _plan(shape, machine, t), machine, w) for t in TIERS}
    runs["disk_cold"] = _run(folder, cfg, shape, _plan(shape, machine, "disk_raw"), machine, w, cold=True)

    def speeds(run, stage, first_step=False):
        return [e.nbytes / e.duration_s for e in run.events if e.stage == stage and e.unit in dec
                and e.duration_s > 0 and (e.token == 0) == first_step]
    out["pinned_copy_bytes_per_s"] = _median(speeds(runs["ram_pinned"], "copy"))
    out["pageable_copy_bytes_per_s"] = _median(speeds(runs["ram_pageable"], "copy"))
    out["cache_read_bytes_per_s"] = _median(speeds(runs["disk_raw"], "read"))
    out["cold_read_bytes_per_s"] = _median(speeds(runs["disk_cold"], "read", first_step=True))
    codec = machine_codec(machine)
    unpacks = [e.duration_s for e in runs["ram_compressed"].events if e.stage == "unpack" and e.unit in dec and e.token > 0]
    # the decode speed per thread that makes the rounds model give the measured time
    out["unpack_bytes_per_s_per_thread"] = unpack_time_s(out["unit_nbytes"], codec) * \
        codec.unpack_bytes_per_s / codec.threads / _median(unpacks)
    shutil.rmtree(folder, ignore_errors=True)
    return out


def stream_overheads(config: dict, machine: MachineSpec, folder: Path, w) -> tuple[dict[str, float], float]:
    """Per tier, the compute-lane seconds the engine adds per streamed item, fitted on a tiny model of the family;
    and the seconds a streaming run starts late (its first token's shortfall once those are in)."""
    tiny = dict(num_hidden_layers=4, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                num_key_value_heads=2, head_dim=64, vocab_size=1024)
    cfg, shape = _model(config, folder, **tiny)
    grids = measure_grids(cfg, machine, "gpu", batches=(w.batch,),
                          prompts=(w.prompt_tokens,), layers=4, new_tokens=w.new_tokens)
    m = machine.model_copy(update={"compute_grids": tuple(grids)})
    n_streamed = sum(u.kind == "decoder" for u in shape.units)
    out, runs = {}, {}
    for tier in TIERS + ("disk_compressed",):
        plan = _plan(shape, m, tier)
        runs[tier] = (plan, _run(folder, cfg, shape, plan, m, w))
        pred = simulate(shape, m, plan, w, Budgets.unlimited()).summary["time_per_token_s"]
        out[tier] = max((runs[tier][1].time_per_token_s - pred) / n_streamed, 0.0)
    # then the start-up: what the first token still lacks with the per-item costs in, median over the tiers
    m = m.model_copy(update={"engine": m.engine.model_copy(update={"stream_overhead_s": out})})
    late = [run.ttft_s - simulate(shape, m, plan, w, Budgets.unlimited()).summary["ttft_s"] for plan, run in runs.values()]
    shutil.rmtree(folder, ignore_errors=True)
    return out, max(float(np.median(late)), 0.0)
