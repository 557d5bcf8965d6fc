"""Where do bit differences between two engine instances come from? (issue 9, exactness)

One decoder layer of real shape on the GPU, large prefill (batch 16 x 2048 tokens): the same weights at the same
address twice, then at a second address, under several backend settings; then decode shapes (GEMMs with a few rows,
attention with one query, a decoder layer after a long cache) repeated on the same inputs, where the validation
matrix saw decode logits differ run to run. Prints and writes JSON.
Run (H200): python lab/probes/h200_determinism.py --out $OUT/determinism.json
"""
from __future__ import annotations

import argparse
import contextlib
import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def layer_inputs(cfg: dict, b: int, s: int):
    from validate import model as M
    from validate.compute_grid import unit_tensor_shapes
    arch = M.Arch.from_config(cfg)
    g = torch.Generator(device="cuda").manual_seed(0)
    w = {k: ((1 + 0.02 * torch.randn(v, generator=g, device="cuda")) if len(v) == 1 else
             0.02 * torch.randn(v, generator=g, device="cuda")).to(torch.bfloat16)
         for k, v in unit_tensor_shapes(cfg, "decoder").items()}
    x = torch.randn(b, s, arch.hidden, generator=g, device="cuda").to(torch.bfloat16)
    cos, sin = M.rope(torch.arange(s, device="cuda"), arch, torch.bfloat16)
    return arch, w, x, cos, sin


def once(arch, w, x, cos, sin):
    from validate import model as M
    cache = M.KVCache(arch, x.shape[0], x.shape[1] + 1, "cuda", torch.bfloat16)
    with torch.inference_mode():
        return M.decoder_layer(x, w, arch, cache, 0, cos, sin)


SETTINGS = {
    "default": contextlib.nullcontext,
    "sdpa_flash_only": lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION]),
    "sdpa_efficient_only": lambda: sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]),
    "sdpa_math_only": lambda: sdpa_kernel([SDPBackend.MATH]),
}


def probe(cfg: dict, b: int, s: int) -> dict:
    arch, w, x, cos, sin = layer_inputs(cfg, b, s)
    out = {}
    for name, ctx in SETTINGS.items():
        for lib in ("default", "cublas", "cublaslt"):
            if lib != "default":
                torch.backends.cuda.preferred_blas_library(lib)
            try:
                with ctx():
                    a1 = once(arch, w, x, cos, sin)
                    a2 = once(arch, w, x, cos, sin)
                    keep = [torch.empty(1 + k * 4099, device="cuda") for k in range(7)]  # move the allocator on
                    w2 = {k: v.clone() for k, v in w.items()}
                    x2 = x.clone()
                    a3 = once(arch, w2, x2, cos, sin)
                out[f"{name}/{lib}"] = {"same_address": bool(torch.equal(a1, a2)), "other_address": bool(torch.equal(a1, a3)),
                                        "max_diff": float((a1.float() - a3.float()).abs().max())}
                del keep, w2, x2
            except Exception as exc:
                out[f"{name}/{lib}"] = {"error": f"{type(exc).__name__}: {exc}"}
            torch.backends.cuda.preferred_blas_library("default")
    # the linear layers alone, weights at two addresses
    h = x.reshape(-1, x.shape[-1])
    wq = w["mlp.gate_proj.weight"]
    y1 = torch.nn.functional.linear(h, wq)
    y2 = torch.nn.functional.linear(h.clone(), wq.clone())
    out["linear_alone"] = {"other_address": bool(torch.equal(y1, y2))}
    return out


def decode_probe(cfg: dict, b: int, ctx: int, reps: int = 20) -> dict:
    """Decode shapes, where the matrix saw run-to-run differences: one new token per sequence after `ctx` cached ones.
    Each piece repeated on the same inputs; 'distinct' is how many different results came out (1 = deterministic)."""
    from validate import model as M
    arch, w, x, cos, sin = layer_inputs(cfg, b, 1)
    out = {}
    with torch.inference_mode():
        h = x.reshape(b, -1)
        for name in ("self_attn.q_proj.weight", "mlp.gate_proj.weight", "mlp.down_proj.weight"):
            wt = w[name]
            inp = h if wt.shape[1] == h.shape[1] else torch.randn(b, wt.shape[1], device="cuda").to(torch.bfloat16)
            outs = [torch.nn.functional.linear(inp, wt) for _ in range(reps)]
            out[f"linear {name} M={b}"] = len({o.cpu().view(torch.int16).numpy().tobytes() for o in outs})
        q = torch.randn(b, arch.heads, 1, arch.head_dim, device="cuda").to(torch.bfloat16)
        k = torch.randn(b, arch.heads, ctx, arch.head_dim, device="cuda").to(torch.bfloat16)
        outs = [torch.nn.functional.scaled_dot_product_attention(q, k, k) for _ in range(reps)]
        out[f"sdpa q=1 ctx={ctx}"] = len({o.cpu().view(torch.int16).numpy().tobytes() for o in outs})
        cache = M.KVCache(arch, b, ctx + 2, "cuda", torch.bfloat16)
        cache.k[:, :, :ctx] = k[:, : arch.kv_heads]
        cache.v[:, :, :ctx] = k[:, : arch.kv_heads]
        c1, s1 = M.rope(torch.arange(ctx, ctx + 1, device="cuda"), arch, torch.bfloat16)
        outs = [M.decoder_layer(x, w, arch, cache, ctx, c1, s1) for _ in range(reps)]
        out[f"decoder layer decode ctx={ctx}"] = len({o.cpu().view(torch.int16).numpy().tobytes() for o in outs})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from validate.checkpoint import make_config
    res = {}
    for name, preset, b, s in (("llama-8b", "llama-3.1-8b", 16, 2048), ("llama-8b", "llama-3.1-8b", 4, 512),
                               ("qwen3-14b", "qwen3-14b", 16, 2048)):
        cfg = make_config(preset)
        res[f"{name} b{b} s{s}"] = probe(cfg, b, s)
        print(name, b, s, json.dumps(res[f"{name} b{b} s{s}"]), flush=True)
    for name, preset, b, ctx in (("llama-8b", "llama-3.1-8b", 4, 512), ("qwen3-4b-like", "qwen3-14b", 16, 2048)):
        res[f"decode {name} b{b} ctx{ctx}"] = decode_probe(make_config(preset), b, ctx)
        print("decode", name, b, ctx, json.dumps(res[f"decode {name} b{b} ctx{ctx}"]), flush=True)
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
