"""Does a CPU layer decode over a long cache as fast in a plan as in its grid? (lab/journal/validation.md, calls N and O)

In calls N and O, Qwen3-8B's CPU decoders took 15-21 ms a decode step at 8 sequences of 2052 cached tokens in the
plan "half the decoders on the CPU", where the CPU grid measured minutes earlier interpolates to 11 ms; Llama-3B's
took 6.7 ms where its grid says 9.2. Host drift or something the grid does not do? This probe times, back to back
and in alternating rounds on one shape (random weights, engines built as calibrate builds them):

  grid: the CPU grid's engine (3 layers, every unit on the CPU, the prompt multiplied on the GPU), batch 4, 8, 16;
  plan: 8 layers; embedding, head and the last 4 decoders resident on the GPU; the first 4 on the CPU from
        pageable RAM; the prompt multiplied on the GPU; batch 8;
  plan-streamed: the matrix's plan, the same with the last 4 decoders streamed from pinned RAM every step.

Each row: the median over decode steps 2.. and CPU decoders 1.. (the first of each step also waits for the GPU).

    python3 lab/probes/h200_cpu_long_probe.py --arch qwen3-8b --out $OUT/cpu-long.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="qwen3-8b")
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from validate.archs import ARCHS
    from hwmodels.presets import load_machine
    from sim.model.families import shape_from_config
    from sim.plan import Workload
    from sim.engines.common import make_plan
    from validate.checkpoint import make_config
    from validate.compute_grid import random_blobs
    from validate.engine import Engine
    preset, over = ARCHS[a.arch]
    machine = load_machine("h200-testbox")
    engines = {}
    gen = "cuda" if torch.cuda.is_available() else "cpu"
    for label, layers in (("grid", 3), ("plan", 8), ("plan-streamed", 8)):
        cfg = make_config(preset, **dict(over, num_hidden_layers=layers))
        cfg.pop("rope_scaling", None)
        shape = shape_from_config(cfg)
        dec = [u.name for u in shape.units if u.kind == "decoder"]
        cpu = [u.name for u in shape.units] if label == "grid" else dec[:len(dec) // 2]
        tiers = {u.name: "ram_pageable" if u.name in cpu else "vram" for u in shape.units}
        if label == "plan-streamed":  # as in the matrix: the GPU half streamed from pinned RAM every step
            tiers.update({n: "ram_pinned" for n in dec[len(dec) // 2:]})
        plan = make_plan(shape, machine, label, tiers, {n: "cpu" for n in cpu}, gpu_offload_min_tokens=17,
                         prefetch_depth=2, vram_slots=3, pinned_slots=3)
        engines[label] = (Engine(None, cfg, shape, plan, machine, blobs=random_blobs(cfg, shape, gen)), set(cpu))
    out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(), "arch": a.arch,
           "prompt": a.prompt, "torch": torch.__version__, "rows": []}
    for e, _ in engines.values():
        e.run(Workload(batch=1, prompt_tokens=32, new_tokens=3))  # warm-up
    for r in range(a.rounds):
        for label, batches in (("grid", (4, 8, 16)), ("plan", (8,)), ("plan-streamed", (8,))):
            e, cpu = engines[label]
            for b in batches:
                run = e.run(Workload(batch=b, prompt_tokens=a.prompt, new_tokens=6))
                first = {}
                times = []
                for ev in sorted(run.events, key=lambda ev: ev.start_s):
                    if ev.stage == "compute" and ev.unit in cpu and ev.token >= 2 and "layers" in ev.unit:
                        if ev.token in first:
                            times.append(ev.end_s - ev.start_s)
                        first.setdefault(ev.token, ev.unit)
                row = {"round": r, "engine": label, "batch": b, "cpu_decoder_ms": 1e3 * statistics.median(times),
                       "spread_ms": [1e3 * min(times), 1e3 * max(times)]}
                out["rows"].append(row)
                print(json.dumps(row), flush=True)
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
