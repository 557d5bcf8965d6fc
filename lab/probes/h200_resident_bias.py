"""Why resident GPU decoders run 2-7% slower in the matrix's plans than in their calibration grid (calls G-J).

Every resident decoder of calls G-J measured 1.02-1.07x its grid point (`lab/journal/validation.md`). Candidates: the GPU
clocks (a plan runs as a short burst after host-side work, the grid as a long series of runs), or the model's size
(the grid times a 3-layer copy, the plans run 4-8 layers). This probe runs the same resident plan (Llama-8B shape,
batch 16, prompt 2048) on a 3-layer and a 6-layer copy: after 3 s of GPU idle, again at once, and after 1 s of GPU
busy work; it records the decoders' median decode span and the SM clock before each run.

    python3 lab/probes/h200_resident_bias.py --out $OUT/resident-bias.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import torch


def sm_clock() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown: {exc}"


def decode_spans(run, names) -> float:
    spans = [e.end_s - e.start_s for e in run.events if e.stage == "compute" and e.token >= 1 and e.unit in names]
    return float(np.median(spans))


def busy(seconds: float) -> None:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ a
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from hwmodels.presets import load_machine
    from sim.model.families import shape_from_config
    from sim.plan import Budgets, Workload
    from sim.engines.placements import POLICIES
    from validate.checkpoint import make_config
    from validate.compute_grid import random_blobs
    from validate.engine import Engine
    machine = load_machine("h200-testbox")
    w = Workload(batch=16, prompt_tokens=2048, new_tokens=6)
    out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "torch": torch.__version__, "runs": []}
    for layers in (3, 6):
        cfg = make_config("llama-3.1-8b", num_hidden_layers=layers)
        cfg.pop("rope_scaling", None)
        shape = shape_from_config(cfg)
        plan = POLICIES["resident"](shape, machine, Workload(), Budgets.of(machine))
        engine = Engine(None, cfg, shape, plan, machine, blobs=random_blobs(cfg, shape, "cuda"))
        names = {u.name for u in shape.units if u.kind == "decoder"}
        engine.run(Workload(batch=1, prompt_tokens=32, new_tokens=3))
        for label, before in (("after 3 s idle", lambda: time.sleep(3)), ("at once", lambda: None),
                              ("after 1 s busy", lambda: busy(1.0)), ("after 3 s idle, again", lambda: time.sleep(3)),
                              ("at once, again", lambda: None)):
            before()
            clock = sm_clock()
            run = engine.run(w)
            row = {"layers": layers, "label": label, "clock_before": clock, "decoder_ms": 1e3 * decode_spans(run, names),
                   "tpot_ms": 1e3 * run.time_per_token_s}
            out["runs"].append(row)
            print(json.dumps(row), flush=True)
        del engine
        torch.cuda.empty_cache()
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
