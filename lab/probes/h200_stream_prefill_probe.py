"""Why does a streamed layer's prefill compute take 1.2-9x its resident time on the H200 (matrix E)? Kernel time or
gaps between kernels?

Runs one Llama-8B-shaped model (4 layers) resident and streamed from pinned RAM and from compressed RAM, batch 4 x
512 tokens, under torch.profiler, and reports per plan: the compute spans the engine records for step 0, the sum of
GPU kernel time on the compute stream during step 0, and the host time the compute thread spent dispatching.
Run (H200): python lab/probes/h200_stream_prefill_probe.py --out $OUT/stream-prefill-probe.json
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/offloadsim-probe")
    a = ap.parse_args()
    from hwmodels.presets import load_machine
    from sim.costs.equations import machine_codec
    from sim.model.resolve import load_model
    from sim.plan import Budgets, Workload
    from sim.engines.placements import POLICIES
    from sim.engines.common import make_plan
    from validate.checkpoint import make_checkpoint, make_config
    from validate.engine import Engine
    from validate.store import build_store
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    cfg = make_config("llama-3.1-8b", num_hidden_layers=4)
    cfg.pop("rope_scaling", None)
    make_checkpoint(cfg, work / "ckpt", device="cuda")
    shape = load_model(str(work / "ckpt"))
    config = json.loads((work / "ckpt" / "config.json").read_text())
    build_store(work / "ckpt", shape, work / "store", compress=True, threads=16)
    machine = load_machine("h200-testbox")
    codec = machine_codec(machine)
    dec = [u.name for u in shape.units if u.kind == "decoder"]
    ends = {u.name: "vram" for u in shape.units if u.kind != "decoder"}
    plans = {"resident": POLICIES["resident"](shape, machine, Workload(), Budgets.of(machine))}
    for tier in ("ram_pinned", "ram_compressed"):
        plans[tier] = make_plan(shape, machine, tier, {**ends, **{n: tier for n in dec}}, prefetch_depth=2,
                                vram_slots=3, pinned_slots=3, codec=codec)
    w = Workload(batch=4, prompt_tokens=512, new_tokens=3)
    out = {}
    for label, plan in plans.items():
        eng = Engine(work / "store", config, shape, plan, machine)
        eng.run(w)  # warm-up
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            run = eng.run(w)
            wall = time.perf_counter() - t0
        spans = {e.unit: round(1e3 * (e.end_s - e.start_s), 3) for e in run.events if e.token == 0 and e.stage == "compute"}
        kernels = [ev for ev in prof.events() if ev.device_type.name == "CUDA" and "Memcpy" not in ev.name]
        mm = [ev for ev in kernels if "gemm" in ev.name.lower() or "cutlass" in ev.name.lower() or "sm90" in ev.name.lower()]
        out[label] = {"step0_compute_spans_ms": spans, "ttft_s": run.ttft_s, "wall_s": wall,
                      "gpu_kernel_ms_total": round(sum(ev.device_time for ev in kernels) / 1e3, 3),
                      "gemm_kernel_ms_total": round(sum(ev.device_time for ev in mm) / 1e3, 3),
                      "top_cpu": prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)}
        print(label, json.dumps({k: v for k, v in out[label].items() if k != "top_cpu"}), flush=True)
        print(out[label]["top_cpu"], flush=True)
        del eng
        torch.cuda.empty_cache()
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
