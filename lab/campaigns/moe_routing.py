"""How many routed experts a prompt reaches in the random-weight MoE checkpoints the llama.cpp calls time.

llama.cpp copies only the experts a step uses when it multiplies CPU-held experts on the GPU (ggml-backend.cpp,
ggml_backend_sched_compute_splits: "copying only the experts that are used"), so a prompt's time there follows how
many distinct experts its tokens pick. offloadsim's router spreads a real model's picks over the experts
(sim.model.routing.ExpertRouter, Zipf skew 0 by default). A checkpoint of random weights (std 0.02, as
validate.checkpoint.make_checkpoint writes them) routes otherwise: past the first block its tokens' hidden states
are much alike, so they pick from few experts. This script builds the same checkpoint on the CPU (same seed), runs a
prompt of random tokens through transformers and prints the distinct experts each block picked. With its token
embeddings multiplied by 200 (--embed-scale, as h200_llamacpp.py --embed-scale 200 writes the GGUF) each token's
own embedding outweighs what attention mixes in, and its tokens reach as many experts as a uniform router's do.

    python lab/campaigns/moe_routing.py --arch qwen3-30b-a3b:4 --tokens 32,128 [--embed-scale 200]
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def distinct_experts(arch: str, layers: int, tokens: list[int], seed: int = 0, embed_scale: float = 1.0) -> dict:
    """{tokens: [distinct experts picked per block]} for ARCHS[arch] cut to `layers` blocks, its token embeddings
    multiplied by embed_scale (as lab/campaigns/h200_llamacpp.py --embed-scale writes them)."""
    import torch
    from transformers import AutoModelForCausalLM
    from lab.campaigns.h200_matrix import ARCHS
    from validate.checkpoint import make_checkpoint, make_config
    preset, over = ARCHS[arch]
    cfg = make_config(preset, **dict(over, num_hidden_layers=layers))
    cfg.pop("rope_scaling", None)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = make_checkpoint(cfg, Path(tmp) / "ckpt", seed=seed)
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    k = cfg["num_experts_per_tok"]
    model.model.embed_tokens.weight.data *= embed_scale
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for n in tokens:
        ids = torch.randint(0, cfg["vocab_size"], (1, n), generator=gen)  # llama-bench's prompts: random tokens
        with torch.no_grad():
            logits = model(ids, output_router_logits=True).router_logits
        out[n] = [int(r.topk(k, dim=-1).indices.unique().numel()) for r in logits]
    n_exp = cfg.get("num_experts") or cfg.get("num_local_experts")
    return {"arch": arch, "layers": layers, "experts": n_exp, "experts_per_token": k, "embed_scale": embed_scale,
            "distinct_per_block": out,
            # what offloadsim's router (sim.model.routing.ExpertRouter, skew 0) expects: each expert is missed by a
            # token with probability 1 - k / E
            "uniform_expected": {n: round(n_exp * (1 - (1 - k / n_exp) ** n), 1) for n in tokens}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen3-30b-a3b:4", help="NAME:LAYERS of lab.campaigns.h200_matrix.ARCHS")
    ap.add_argument("--tokens", default="32,128", help="prompt lengths")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--embed-scale", type=float, default=1.0, help="as lab/campaigns/h200_llamacpp.py --embed-scale")
    a = ap.parse_args()
    from lab.campaigns.h200_matrix import ARCHS
    name, layers = (a.arch.split(":") + ["4"])[:2]
    moe = sorted(k for k, (preset, over) in ARCHS.items() if "moe_intermediate_size" in over)
    if name not in moe or not layers.isdigit() or int(layers) < 1:
        raise SystemExit(f"--arch: {a.arch!r} is not NAME:LAYERS of an MoE in benchmarks/h200_matrix.ARCHS; give one "
                         f"of {', '.join(moe)} with a layer count >= 1, e.g. qwen3-30b-a3b:4.")
    if not 0 < a.embed_scale < float("inf"):
        raise SystemExit(f"--embed-scale: {a.embed_scale} is not a positive finite number; give e.g. 1 or 200.")
    print(json.dumps(distinct_experts(name, int(layers), [int(t) for t in a.tokens.split(",")], a.seed,
                                      a.embed_scale)))


if __name__ == "__main__":
    main()
