"""Where the first CPU decode step of a llama.cpp-like plan loses its 40-60 ms (lab/journal/validation.md, calls G and H).

In 3 of 4 llama.cpp-like runs (embedding, head and the first decoders computed on the CPU from pinned RAM; the
32-token prefill offloaded to the GPU) the first CPU decoder of the first decode step took 41-58 ms against 3-5 ms
at every later step, although the engine's warm-up had run that layer's decode on the CPU. The CPU-decoder plans
(pageable weights, embedding and head on the GPU) did not show it. This probe runs variants of the plan on
Llama-1B's layer shapes and, at that step, splits the CPU decoder into its input transfers and the layer, and
profiles the layer once:

  A. as in the matrix (pinned CPU layers, prefill offloaded);  B. the same with pageable CPU layers;
  C. a 16-token prompt (prefill on the CPU, nothing offloaded).

    python3 lab/probes/h200_cpu_first_step.py --out $OUT/cpu-first-step.json
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch

from validate import stream_run

SPLITS: list[dict] = []
PROFILE = False


def instrument():
    """Wrap StreamRun.unit_step: per CPU decoder call, the seconds of its input transfers and of the layer."""
    orig = stream_run.StreamRun.unit_step
    state = {"profiled": False}

    def timed(self, kind, name, weights, dev, st):
        if kind != "decoder" or dev.type != "cpu" or not getattr(self, "clock", None):
            return orig(self, kind, name, weights, dev, st)
        t0 = time.perf_counter()
        st.x.to(dev), st.cos.to(dev), st.sin.to(dev)
        t1 = time.perf_counter()
        prof = None
        if st.decode and not state["profiled"] and PROFILE:
            state["profiled"] = True
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.__enter__()
        orig(self, kind, name, weights, dev, st)
        t2 = time.perf_counter()
        if prof is not None:
            prof.__exit__(None, None, None)
            SPLITS.append({"profile": prof.key_averages().table(sort_by="cpu_time_total", row_limit=12)})
        SPLITS.append({"unit": name, "decode": bool(st.decode), "start": self.start, "inputs_s": t1 - t0,
                       "layer_s": t2 - t1})
    stream_run.StreamRun.unit_step = timed
    return state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/offloadsim-first-step")
    ap.add_argument("--profile", action="store_true", help="profile the first CPU decoder of the first decode step")
    a = ap.parse_args()
    global PROFILE
    PROFILE = a.profile
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from h200_matrix import ARCHS
    from hwmodels.presets import load_machine
    from sim.costs.memory import min_vram_bytes
    from sim.model.resolve import load_model
    from sim.plan import Budgets, Workload
    from sim.engines.placements import POLICIES
    from validate.checkpoint import make_checkpoint, make_config
    from validate.engine import Engine
    from validate.store import build_store
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    preset, over = ARCHS["llama-1b"]
    cfg = make_config(preset, **over)
    cfg.pop("rope_scaling", None)
    make_checkpoint(cfg, work / "ckpt", device="cuda" if torch.cuda.is_available() else "cpu")
    shape = load_model(str(work / "ckpt"))
    config = json.loads((work / "ckpt" / "config.json").read_text())
    build_store(work / "ckpt", shape, work / "store", compress=False, threads=16)
    machine = load_machine("h200-testbox")
    state = instrument()
    total = sum(u.nbytes for u in shape.units)
    out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "torch": torch.__version__,
           "threads": torch.get_num_threads(), "variants": {}}
    for label, prompt, tier in (("A pinned, offloaded prefill", 32, None), ("B pageable", 32, "ram_pageable"),
                                ("C 16-token prompt", 16, None), ("A again", 32, None)):
        w = Workload(batch=1, prompt_tokens=prompt, new_tokens=6)
        bud = Budgets.of(machine, vram=min_vram_bytes(shape, w) + int(0.4 * total))
        plan = POLICIES["llamacpp"](shape, machine, w, bud)
        if tier:
            plan = plan.model_copy(update={"placements": tuple(p.model_copy(update={"tier": tier})
                                                               if p.tier == "ram_pinned" else p for p in plan.placements)})
        SPLITS.clear()
        state["profiled"] = False
        run = Engine(work / "store", config, shape, plan, machine).run(w)
        steps = {}
        for e in run.events:
            if e.stage == "compute":
                steps.setdefault(e.token, []).append((e.unit.split(".")[-1], round((e.end_s - e.start_s) * 1e3, 2)))
        out["variants"][label] = {"placements": [(p.unit, p.tier, p.compute) for p in plan.placements],
                                  "unit_ms_by_step": steps, "splits": list(SPLITS)}
        print(label, json.dumps({s: v for s, v in steps.items() if s <= 2}), flush=True)
        print("  splits", [(d.get("unit"), d.get("decode"), round(d.get("inputs_s", 0) * 1e3, 2),
                            round(d.get("layer_s", 0) * 1e3, 2)) for d in SPLITS if "unit" in d][:6], flush=True)
        prof = [d["profile"] for d in SPLITS if "profile" in d]
        if prof:
            print(prof[0], flush=True)
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
