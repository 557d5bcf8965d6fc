"""The engine with and without CUDA graphs (issue 9): time per token and TTFT of the same all-resident runs, launched
eagerly and as one captured graph per unit, repeated in fresh engines; logits of the two compared bit for bit.

Run (H200): python3 lab/probes/h200_graphs_probe.py --out $OUT/graphs-probe.json
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

ARCHS = {"llama-8b": ("llama-3.1-8b", dict(num_hidden_layers=4)),
         "qwen3-4b": ("qwen3-14b", dict(num_hidden_layers=8, hidden_size=2560, intermediate_size=9728,
                                        num_attention_heads=32, num_key_value_heads=8, head_dim=128))}


def main() -> None:
    from hwmodels.presets import load_machine
    from sim.model.families import shape_from_config
    from sim.plan import Budgets, Workload
    from sim.engines.placements import POLICIES
    from validate.checkpoint import make_config
    from validate.compute_grid import random_blobs
    from validate.engine import Engine
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    machine = load_machine("h200-testbox")
    out = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": []}
    for arch, (preset, over) in ARCHS.items():
        cfg = make_config(preset, **over)
        cfg.pop("rope_scaling", None)
        shape = shape_from_config(cfg)
        blobs = random_blobs(cfg, shape, "cuda" if torch.cuda.is_available() else "cpu")
        plan = POLICIES["resident"](shape, machine, Workload(), Budgets.unlimited())
        for b, p in ((1, 32), (4, 512), (16, 2048)):
            w = Workload(batch=b, prompt_tokens=p, new_tokens=8)
            ref = {}
            for graphs in (False, True):
                for r in range(a.repeats):
                    t = time.perf_counter()
                    eng = Engine(None, cfg, shape, plan, machine, blobs=blobs, graphs=graphs)
                    eng.run(Workload(batch=b, prompt_tokens=p, new_tokens=3))  # warm-up of this engine
                    run = eng.run(w)
                    same = None
                    if r == 0 and graphs:
                        same = all(torch.equal(x, y) for x, y in zip(ref["logits"], run.logits))
                    if r == 0 and not graphs:
                        ref["logits"] = run.logits
                    row = {"arch": arch, "batch": b, "prompt": p, "graphs": graphs, "repeat": r,
                           "ttft_s": run.ttft_s, "time_per_token_s": run.time_per_token_s,
                           "bit_identical_to_eager": same, "wall_s": time.perf_counter() - t}
                    out["runs"].append(row)
                    print(json.dumps(row), flush=True)
                    del eng
            torch.cuda.empty_cache()
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
