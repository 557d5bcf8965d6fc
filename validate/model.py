"""A small functional decoder (Llama / Mistral / Qwen2 / Qwen3) whose layers take their weights as arguments, so a
layer computes from whatever buffer its weights were streamed into (gpt-fast style: plain functions, static KV cache).
Weights use Hugging Face tensor names relative to the unit (e.g. 'self_attn.q_proj.weight')."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hwmodels.units import InputError
from sim.engines.offloadsim.engine import RUNS_FAMILIES as SUPPORTED


@dataclass(frozen=True)
class Arch:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    theta: float
    qk_norm: bool
    rope_inv: tuple[float, ...] | None = None  # scaled rotary frequencies (a rope_scaling type); None: theta's own
    rope_scale: float = 1.0                    # what such a type multiplies cos and sin by

    @classmethod
    def from_config(cls, cfg: dict) -> "Arch":
        t = cfg.get("model_type")
        if t not in SUPPORTED:
            raise InputError(f"checkpoint: the engine runs {', '.join(SUPPORTED)} models; model_type {t!r} is simulated "
                             "only, validate a dense model.")
        if cfg.get("tie_word_embeddings"):
            raise InputError("checkpoint: tied embeddings are not supported by the engine; set tie_word_embeddings false.")
        h, n = cfg["hidden_size"], cfg["num_attention_heads"]
        inv, scale = _scaled_rope(cfg)
        return cls(hidden=h, heads=n, kv_heads=cfg.get("num_key_value_heads", n), head_dim=cfg.get("head_dim") or h // n,
                   eps=cfg.get("rms_norm_eps", 1e-6), theta=float(cfg.get("rope_theta") or (cfg.get("rope_parameters") or {})
                                                                  .get("rope_theta", 10000.0)), qk_norm=t == "qwen3",
                   rope_inv=inv, rope_scale=scale)


def _scaled_rope(cfg: dict) -> tuple[tuple[float, ...] | None, float]:
    """The rotary frequencies of a config's rope scaling (Llama 3.1's 'llama3', 'linear', 'yarn', ...) from
    transformers' own functions; (None, 1.0) without scaling. Types that change with the sequence length are refused."""
    kind = (cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}).get("rope_type") \
        or (cfg.get("rope_scaling") or {}).get("type") or "default"
    if kind == "default":
        return None, 1.0
    if kind in ("dynamic", "longrope"):
        raise InputError(f"checkpoint: rope scaling {kind!r} changes with the sequence length and the engine does not "
                         "implement it; use a checkpoint without it.")
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    config = AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    inv, scale = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    return tuple(float(x) for x in inv), float(scale)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * x.to(dtype)


def rope(positions: torch.Tensor, arch: Arch, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    if arch.rope_inv is not None:
        inv = torch.tensor(arch.rope_inv, device=positions.device, dtype=torch.float)
    else:
        inv = 1.0 / (arch.theta ** (torch.arange(0, arch.head_dim, 2, device=positions.device, dtype=torch.float)
                                    / arch.head_dim))
    freqs = positions[:, None].float() * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * arch.rope_scale).to(dtype), (emb.sin() * arch.rope_scale).to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


class KVCache:
    """Static per-layer K and V: [batch, kv_heads, max_len, head_dim] on the layer's device."""

    def __init__(self, arch: Arch, batch: int, max_len: int, device, dtype):
        shape = (batch, arch.kv_heads, max_len, arch.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)


def embed(ids: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.embedding(ids, w["weight"])


def decoder_layer(x: torch.Tensor, w: dict[str, torch.Tensor], arch: Arch, cache: KVCache, start: int,
                  cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor | None = None) -> torch.Tensor:
    """One decoder block on x [batch, seq, hidden] whose tokens sit at positions start..start+seq-1; or, with `pos`
    (a one-element position tensor on x's device), one decode token at that position. The decode form has static
    shapes (it writes the cache with index_copy_ and attends over the whole cache under a mask), so a CUDA graph
    captured once serves every step, and eager and captured runs execute the same kernels."""
    b, s, _ = x.shape
    h = rms_norm(x, w["input_layernorm.weight"], arch.eps)
    q = F.linear(h, w["self_attn.q_proj.weight"], w.get("self_attn.q_proj.bias")).view(b, s, arch.heads, arch.head_dim)
    k = F.linear(h, w["self_attn.k_proj.weight"], w.get("self_attn.k_proj.bias")).view(b, s, arch.kv_heads, arch.head_dim)
    v = F.linear(h, w["self_attn.v_proj.weight"], w.get("self_attn.v_proj.bias")).view(b, s, arch.kv_heads, arch.head_dim)
    if arch.qk_norm:
        q = rms_norm(q, w["self_attn.q_norm.weight"], arch.eps)
        k = rms_norm(k, w["self_attn.k_norm.weight"], arch.eps)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    if pos is None:
        cache.k[:, :, start:start + s] = k
        cache.v[:, :, start:start + s] = v
        keys, values, mask = cache.k[:, :, :start + s], cache.v[:, :, :start + s], None
    else:
        cache.k.index_copy_(2, pos, k)
        cache.v.index_copy_(2, pos, v)
        keys, values = cache.k, cache.v
        mask = (torch.arange(keys.shape[2], device=pos.device) <= pos).view(1, 1, 1, -1)  # the positions written
    rep = arch.heads // arch.kv_heads
    if rep > 1 and pos is not None and x.device.type == "cpu":
        # one decode token on the CPU: the query heads that share a KV head become that head's query rows (one
        # position, one mask), so no copy of the cache is made; repeating the cache cost about 29 of the 38 ms
        # of a Qwen3-8B layer at 8 x 2048 tokens on the H200 host (lab/data/validation/matrix/matrix-m.json)
        attn = F.scaled_dot_product_attention(q.reshape(b, arch.kv_heads, rep, arch.head_dim), keys, values,
                                              attn_mask=mask).reshape(b, arch.heads, 1, arch.head_dim)
    else:
        if rep > 1:  # expanded K/V let SDPA pick its fused kernel (with GQA heads it falls back to the math
            # kernel: S x S scores in memory, allocator-bound timings)
            keys, values = keys.repeat_interleave(rep, dim=1), values.repeat_interleave(rep, dim=1)
        attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                              is_causal=(pos is None and start == 0 and s > 1))
    x = x + F.linear(attn.transpose(1, 2).reshape(b, s, -1), w["self_attn.o_proj.weight"])
    h = rms_norm(x, w["post_attention_layernorm.weight"], arch.eps)
    gate = F.silu(F.linear(h, w["mlp.gate_proj.weight"])) * F.linear(h, w["mlp.up_proj.weight"])
    return x + F.linear(gate, w["mlp.down_proj.weight"])


def head(x: torch.Tensor, w: dict[str, torch.Tensor], arch: Arch) -> torch.Tensor:
    """Final norm and logits of the last position, in float32."""
    return F.linear(rms_norm(x[:, -1:], w["model.norm.weight"], arch.eps), w["lm_head.weight"]).float()[:, 0]
