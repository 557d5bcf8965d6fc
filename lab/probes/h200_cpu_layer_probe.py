"""transformers' CPU decode against offloadsim's layer code on the same weights (lab/journal/peers.md, twenty-third session).

Accelerate's CPU-executed maps (transformers computing every module on the CPU) ran 20-32% over offloadsim's CPU grid
in peers calls G and H; neither the thread count, the mapped weights nor their alignment explains it
(h200_cpu_threads_probe.py, h200_map_gemv_probe.py, h200_align_probe.py). This probe decodes one random-weight
checkpoint three ways in one process, interleaved over rounds: transformers' `generate` (time per token, its own
stamps); offloadsim's functional layers (validate/model.py, as its engine and its CPU grid run them) over the very
tensors transformers holds; and the same functions over copies of them in anonymous memory (as the grid holds its
weights). Then one profile of each (torch.profiler, operators by their own CPU time).

    python3 lab/probes/h200_cpu_layer_probe.py --arch qwen3-14b:3 --out $OUT/cpu-layer.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import time
from pathlib import Path

import torch

from validate.archs import arch_config


def functional_step(layers, head_w, emb_w, arch, caches, pos: int, token: torch.Tensor) -> torch.Tensor:
    import validate.model as M
    p = torch.tensor([pos])
    cos, sin = M.rope(p, arch, torch.bfloat16)
    x = M.embed(token.view(1, 1), {"weight": emb_w})
    for w, cache in zip(layers, caches):
        x = M.decoder_layer(x, w, arch, cache, 0, cos, sin, p)
    return M.head(x, head_w, arch)


def profile_table(fn, rows: int = 25) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    out = []
    for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:rows]:
        out.append({"op": e.key, "calls": e.count, "self_ms": e.self_cpu_time_total / 1e3,
                    "total_ms": e.cpu_time_total / 1e3})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="qwen3-14b:3")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--work", default="/tmp/offloadsim-cpu-layer")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM

    import validate.model as M
    from lab.campaigns.h200_peers import timed_generate
    from validate.checkpoint import make_checkpoint
    arch_name, cfg = arch_config(a.arch)
    ckpt = Path(a.work) / arch_name
    shutil.rmtree(ckpt, ignore_errors=True)
    make_checkpoint(cfg, ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16)
    n = os.cpu_count() or 4
    torch.set_num_threads(n)
    arch = M.Arch.from_config(dict(cfg, tie_word_embeddings=False))
    sd = dict(model.state_dict())
    nl = cfg["num_hidden_layers"]
    mapped = [{k[len(f"model.layers.{i}."):]: v for k, v in sd.items() if k.startswith(f"model.layers.{i}.")}
              for i in range(nl)]
    anon = [{k: v.clone() for k, v in w.items()} for w in mapped]
    head_w = {"model.norm.weight": sd["model.norm.weight"], "lm_head.weight": sd["lm_head.weight"]}
    head_anon = {k: v.clone() for k, v in head_w.items()}
    emb_w = sd["model.embed_tokens.weight"]
    prompt = 128
    ids = torch.randint(0, cfg["vocab_size"], (1, prompt), generator=torch.Generator().manual_seed(0))

    def caches():
        return [M.KVCache(arch, 1, prompt + a.steps + 8, "cpu", torch.bfloat16) for _ in range(nl)]

    def forward_steps(steps: int) -> list[float]:
        """transformers' forward alone, one token at a time over its cache (no generate loop around it)."""
        from transformers import DynamicCache
        out = model(input_ids=ids, past_key_values=DynamicCache(config=model.config), use_cache=True, logits_to_keep=1)
        tok, times = out.logits[:, -1:].argmax(-1), []
        for _ in range(steps):
            t = time.perf_counter()
            out = model(input_ids=tok, past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
            tok = out.logits[:, -1:].argmax(-1)
            times.append(time.perf_counter() - t)
        return times

    def functional(ws, hw) -> float:
        cs, times = caches(), []
        for s in range(a.steps):
            t = time.perf_counter()
            functional_step(ws, hw, emb_w, arch, cs, prompt + s, ids[0, s])
            times.append(time.perf_counter() - t)
        return statistics.median(times[1:])

    with torch.no_grad():
        timed_generate(model, ids, 3, lambda: None)
        functional(mapped, head_w)
        res = {"transformers generate": [], "transformers forward": [], "functional, transformers' tensors": [],
               "functional, anonymous copies": []}
        for _ in range(a.rounds):
            res["transformers generate"].append(timed_generate(model, ids, a.steps, lambda: None)["time_per_token_s"])
            res["transformers forward"].append(statistics.median(forward_steps(a.steps)[1:]))
            res["functional, transformers' tensors"].append(functional(mapped, head_w))
            res["functional, anonymous copies"].append(functional(anon, head_anon))
        med = {k: statistics.median(v) for k, v in res.items()}
        print({k: round(v * 1e3, 1) for k, v in med.items()}, "ms a token", flush=True)
        from transformers import DynamicCache
        pre = model(input_ids=ids, past_key_values=DynamicCache(config=model.config), use_cache=True,
                    logits_to_keep=1)
        tok = pre.logits[:, -1:].argmax(-1)
        prof_hf = profile_table(lambda: [model(input_ids=tok, past_key_values=pre.past_key_values, use_cache=True,
                                               logits_to_keep=1) for _ in range(2)])
        cs = caches()
        prof_fn = profile_table(lambda: [functional_step(anon, head_anon, emb_w, arch, cs, prompt + s, ids[0, s])
                                         for s in range(2)])
    for name, tab in (("transformers (2 decode steps)", prof_hf), ("functional (2 decode steps)", prof_fn)):
        print(name)
        for r in tab[:15]:
            print(f"  {r['op']:40s} {r['calls']:6d} {r['self_ms']:9.1f} ms")
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "torch": torch.__version__,
           "arch": a.arch, "threads": n, "rounds_s": res, "median_s": med,
           "profile_transformers": prof_hf, "profile_functional": prof_fn}
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(a.out)
    shutil.rmtree(ckpt, ignore_errors=True)


if __name__ == "__main__":
    main()
