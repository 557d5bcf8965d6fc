"""calibrate's compute measurements: a decoder layer timed for the roofline fallback, the CPU grids in interleaved
rounds, and a CPU decoder's slowdown beside host-to-device copies."""
from __future__ import annotations

import numpy as np
import torch

from sim.analysis.interval import CALIBRATE_ROUNDS  # the prediction interval reads a grid's spread as that many draws
from sim.engines.common import make_plan
from sim.model.families import shape_from_config
from sim.plan import Workload
from validate import model as M
from validate.accepted import fastest_rate
from validate.calibrate_host import MiB, _best, _rounds
from validate.compute_grid import measure_grids, median_grids, random_blobs, unit_times
from validate.engine import Engine


def compute(config: dict, device: str, batch_sizes=(1, 4), seqs=(1, 128)) -> dict:
    """Time the engine's decoder layer on real-shape random weights: decode and prefill, fit the roofline."""
    arch = M.Arch.from_config(config)
    unit = next(u for u in shape_from_config(config).units if u.kind == "decoder")
    h, inter, d = arch.hidden, config["intermediate_size"], arch.head_dim
    shapes = {"input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
              "self_attn.q_proj.weight": (arch.heads * d, h), "self_attn.k_proj.weight": (arch.kv_heads * d, h),
              "self_attn.v_proj.weight": (arch.kv_heads * d, h), "self_attn.o_proj.weight": (h, arch.heads * d),
              "mlp.gate_proj.weight": (inter, h), "mlp.up_proj.weight": (inter, h), "mlp.down_proj.weight": (h, inter)}
    if arch.qk_norm:
        shapes.update({"self_attn.q_norm.weight": (d,), "self_attn.k_norm.weight": (d,)})
    w = {k: (torch.randn(s, device=device) * 0.02).to(torch.bfloat16) for k, s in shapes.items()}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out = {}
    with torch.inference_mode():
        for b in batch_sizes:
            for s in seqs:
                cache = M.KVCache(arch, b, s + 1, device, torch.bfloat16)
                x = torch.randn(b, s, h, device=device).to(torch.bfloat16)
                pos = torch.arange(s, device=device)
                cos, sin = M.rope(pos, arch, torch.bfloat16)

                def run():
                    M.decoder_layer(x, w, arch, cache, 0, cos, sin)
                    sync()
                run()
                out[f"layer_b{b}_s{s}_rounds_s"] = _rounds(run, 5)
                out[f"layer_b{b}_s{s}_s"] = min(out[f"layer_b{b}_s{s}_rounds_s"])
        # decode as the engine runs it: 8 layers back to back, one synchronisation (dispatch overlaps the device)
        cache = M.KVCache(arch, 1, 2, device, torch.bfloat16)
        x = torch.randn(1, 1, h, device=device).to(torch.bfloat16)
        cos, sin = M.rope(torch.arange(1, device=device), arch, torch.bfloat16)

        def seq():
            for _ in range(8):
                M.decoder_layer(x, w, arch, cache, 0, cos, sin)
            sync()
        seq()
        out["layer_b1_s1_in_sequence_s"] = _best(seq, 3) / 8
    t1 = out["layer_b1_s1_s"]
    flops_pf = unit.flops(max(batch_sizes), max(seqs), 0)
    rounds_pf = out[f"layer_b{max(batch_sizes)}_s{max(seqs)}_rounds_s"]
    return {"measured": out, "layer_nbytes": unit.nbytes, "layer_launches": unit.launches,
            "decode_bytes_per_s": unit.nbytes / t1, "prefill_flops_per_s": fastest_rate(flops_pf, rounds_pf)}


def contention(config: dict, machine, cuda: bool) -> dict:
    """CPU decoder time alone and while host-to-device copies (or, without CUDA, memcpys) run beside it."""
    import threading
    cfg = dict(config, num_hidden_layers=2)
    cfg.pop("rope_scaling", None)
    shape = shape_from_config(cfg)
    names = [u.name for u in shape.units]
    plan = make_plan(shape, machine, "calibrate", {n: "ram_pageable" for n in names}, {n: "cpu" for n in names})
    engine = Engine(None, cfg, shape, plan, machine, blobs=random_blobs(cfg, shape, "cuda" if cuda else "cpu"))
    kinds = {u.name: u.kind for u in shape.units}
    w = Workload(batch=1, prompt_tokens=8, new_tokens=6)

    def decoder_s() -> float:
        ev = engine.run(w).events
        return float(np.median([t for (s, k), v in unit_times(ev, kinds).items() if s > 0 and k == "decoder" for t in v]))
    decoder_s()
    alone = decoder_s()
    stop = threading.Event()
    src = torch.ones(64 * MiB, dtype=torch.uint8)
    dst = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda" if cuda else "cpu")

    def copies():
        while not stop.is_set():
            dst.copy_(src)
            if cuda:
                torch.cuda.synchronize()
    th = threading.Thread(target=copies, daemon=True)
    th.start()
    try:
        busy = decoder_s()
    finally:
        stop.set()
        th.join()
    return {"cpu_decoder_alone_s": alone, "cpu_decoder_beside_copies_s": busy, "factor": max(busy / alone, 1.0)}


CPU_ROUNDS = CALIBRATE_ROUNDS  # the CPU grids: the median of this many rounds, pageable and pinned interleaved


def cpu_grids(config: dict, machine, grid: dict, rounds: int) -> list:
    """CPU grids with the weights in pageable and in pinned RAM (a plan's CPU layers read from either), timed in
    `rounds` interleaved rounds (pageable, pinned, pageable, ...) so that both see the same host drift, each point
    the median over the rounds."""
    per: dict[str, list] = {"pageable": [], "pinned": []}
    for _ in range(rounds):
        for memory, got in per.items():
            got.append(measure_grids(config, machine, "cpu", memory=memory, **grid))
    return [g for got in per.values() for g in median_grids(got)]
