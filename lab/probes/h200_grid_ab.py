"""calibrate's CPU grid measured by two versions of offloadsim's engine, alternately on one host (lab/journal/peers.md,
twenty-fourth session).

Accelerate's CPU runs were 0.83-0.98x offloadsim's CPU grid in the calls of 2026-11-30 (B-E) and 1.13-1.23x in those
of 2026-12-01 (H, I; G's exported plans alike). Between them commit 22fe2ef changed the engine's CPU decode step
(grouped query heads attend without repeating the cache). This times the decoder and head of the CPU grid (batch 1
and 4, a 128-token prompt, pageable weights) from each source tree in its own process, alternating over rounds so
that both see the host's drift; a shape without grouped KV heads (Phi-3-mini) is the control. With --hf,
transformers' own CPU decode of the same 3-layer shape is timed in the same rotation: its step against the grid's
embedding + 3 decoders + head is the ratio Accelerate's cpu_compute_scale stands for, free of the drift between
calibrate and a later run.

    python3 lab/probes/h200_grid_ab.py --trees old:.oldsnap,new:. --hf --archs llama-8b,phi3-mini \
        --out $OUT/grid-ab.json
    python lab/probes/h200_grid_ab.py --report lab/data/peers/grid-ab.json   # here: per round, grid and ratio
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from validate.archs import arch_config

CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from hwmodels.presets import load_machine
from validate.compute_grid import measure_grids
cfg = json.loads(sys.argv[2])
out = {}
for g in measure_grids(cfg, load_machine("h200-testbox"), "cpu", batches=(1, 4), prompts=(128,), layers=3,
                       graphs=False):
    out[g.unit.kind] = [row[0] * 1e3 for row in g.decode_s]
print(json.dumps(out))
"""

# transformers' own CPU decode of the same 3-layer shape (random weights from the config), as Accelerate's CPU maps
# run it: a 128-token prompt, then one token at a time over its cache; median milliseconds a step at batch 1 and 4
HF_CHILD = """
import json, statistics, sys, time
import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache
cfg = dict(json.loads(sys.argv[2]), num_hidden_layers=3, tie_word_embeddings=False)
cfg.pop("rope_scaling", None)
torch.set_num_threads(torch.get_num_threads())
model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg), dtype=torch.bfloat16).eval()
out = {}
with torch.no_grad():
    for b in (1, 4):
        ids = torch.randint(0, cfg["vocab_size"], (b, 128))
        o = model(input_ids=ids, past_key_values=DynamicCache(config=model.config), use_cache=True, logits_to_keep=1)
        tok, times = o.logits[:, -1:].argmax(-1), []
        for _ in range(6):
            t = time.perf_counter()
            o = model(input_ids=tok, past_key_values=o.past_key_values, use_cache=True, logits_to_keep=1)
            tok = o.logits[:, -1:].argmax(-1)
            times.append(time.perf_counter() - t)
        out[b] = statistics.median(times[1:]) * 1e3
print(json.dumps({"step": [out[1], out[4]]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default="", help="NAME:DIR,...")
    ap.add_argument("--report", default=None, help="print a recorded run's rounds: each grid's total, the ratio")
    ap.add_argument("--archs", default="llama-8b,phi3-mini")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hf", action="store_true", help="also transformers' own CPU decode of the shape, alternated")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.report:
        return report(json.loads(Path(a.report).read_text()))
    if not a.trees or not a.out:
        ap.error("--trees and --out are needed to measure (or give --report FILE)")
    if any(":" not in t for t in a.trees.split(",")):
        ap.error(f"--trees {a.trees!r}: give NAME:DIR pairs separated by commas, e.g. old:.oldsnap,new:.")
    trees = dict(t.split(":", 1) for t in a.trees.split(","))
    if a.hf:
        trees["transformers"] = "."
    res: dict = {arch: {name: [] for name in trees} for arch in a.archs.split(",")}
    for r in range(a.rounds):
        for arch in res:
            for name, tree in trees.items():
                child = HF_CHILD if name == "transformers" else CHILD
                p = subprocess.run([sys.executable, "-c", child, str(Path(tree).resolve()),
                                    json.dumps(arch_config(arch)[1])], capture_output=True,
                                   text=True)
                got = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-300:]}
                res[arch][name].append(got)
                print(f"round {r} {arch} {name}: {got}", flush=True)
        write(a.out, trees, res)  # every round, so a run cut short keeps what it measured


def report(d: dict) -> None:
    """Per architecture, round and batch: each tree's step as the grid prices it (embedding + 3 decoders + head,
    ms) and transformers' measured step over it; then the median of those ratios."""
    for arch, per in d["rounds"].items():
        ratios: dict = {}
        for r, hf in enumerate(per.get("transformers", [])):
            for name in (n for n in per if n != "transformers"):
                g = per[name][r]
                if "error" in g or "error" in hf:
                    continue
                for i, b in enumerate((1, 4)):
                    grid = g["embedding"][i] + 3 * g["decoder"][i] + g["lm_head"][i]
                    ratios.setdefault((name, b), []).append(hf["step"][i] / grid)
                    print(f"{arch} round {r} {name} batch {b}: grid {grid:.1f} ms, transformers {hf['step'][i]:.1f} "
                          f"ms, ratio {hf['step'][i] / grid:.2f}")
        for (name, b), v in ratios.items():
            print(f"{arch} {name} batch {b}: median ratio {statistics.median(v):.2f} over {len(v)} rounds "
                  f"({min(v):.2f}-{max(v):.2f})")


def write(path: str, trees: dict, res: dict) -> None:
    med = {arch: {name: {k: [statistics.median(x[k][i] for x in runs if k in x) for i in range(2)]
                         for k in ("embedding", "decoder", "lm_head", "step") if k in runs[0]}
                  for name, runs in per.items()} for arch, per in res.items()}
    print("medians, ms at batch 1 and 4:", json.dumps(med))
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "trees": trees, "rounds": res, "median_ms": med}
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(path)


if __name__ == "__main__":
    main()
