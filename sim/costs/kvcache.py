"""The KV cache as a placed object: its size as a request grows, and what keeping it in RAM costs a step.

Equations (pure; SI units):
- growth: a layer holds kv_bytes_per_token x batch x (context + new tokens) after a step (16-bit cache);
- copied per step (Plan.kv 'pinned' or 'pageable'): before a step the GPU needs the layer's cache so far (nothing at
  the prompt's step), after it the step's new entries go back to RAM; K and V are copied apart, each copy with its
  fixed cost, the bytes at the link's speed;
- attention on the CPU (Plan.kv 'cpu', llama.cpp's -nkvo): the layer's attention runs where the cache lives, a
  roofline of its FLOPs at the CPU's rate and the cache's bytes at the CPU's memory speed, in place of the GPU's
  (the same roofline on the GPU), plus the round trip of its inputs and output over the link.
"""
from __future__ import annotations

from hwmodels.specs import CpuSpec, GpuSpec
from sim.model.shapes import UnitShape

# the attention's inputs and output per token that cross the link with attention on the CPU: q, k, v and the
# output, 16 bit, counted as four hidden-wide vectors
ATTENTION_IO_VECTORS = 4


def kv_bytes(unit: UnitShape, batch: int, tokens: int) -> int:
    """Bytes of one layer's KV cache holding `tokens` positions of `batch` sequences."""
    return unit.kv_bytes_per_token * batch * tokens


def kv_copy_s(unit: UnitShape, batch: int, new_tokens: int, context: int, bytes_per_s: float,
              latency_s: float) -> float:
    """Seconds to copy one layer's cache of `context` positions to the GPU before a step of `new_tokens`, and its
    new entries back after it (K and V each a copy); 0 for a unit without a cache."""
    if unit.kv_bytes_per_token == 0:
        return 0.0
    copy_in = 2 * latency_s + kv_bytes(unit, batch, context) / bytes_per_s if context else 0.0
    return copy_in + 2 * latency_s + kv_bytes(unit, batch, new_tokens) / bytes_per_s


def attention_flops(unit: UnitShape, batch: int, new_tokens: int, context: int) -> float:
    """Score and value FLOPs of one layer's attention (as UnitShape.flops counts them)."""
    return unit.attn_flops_per_ctx_token * batch * (new_tokens * context + new_tokens * (new_tokens + 1) / 2)


def gpu_attention_s(unit: UnitShape, gpu: GpuSpec, batch: int, new_tokens: int, context: int) -> float:
    """The attention's share of a layer's GPU time: its FLOPs or its cache's bytes, whichever takes longer."""
    nbytes = kv_bytes(unit, batch, context + new_tokens)
    return max(attention_flops(unit, batch, new_tokens, context) / gpu.bf16_flops_per_s,
               nbytes / gpu.vram_bytes_per_s)


def cpu_attention_s(unit: UnitShape, cpu: CpuSpec, batch: int, new_tokens: int, context: int) -> float:
    """One layer's attention on the CPU over a cache in RAM, with its two operators' overhead."""
    nbytes = kv_bytes(unit, batch, context + new_tokens)
    return max(attention_flops(unit, batch, new_tokens, context) / cpu.flops_per_s,
               nbytes / cpu.memory_bytes_per_s) + 2 * cpu.op_overhead_s


def attention_io_s(unit: UnitShape, batch: int, new_tokens: int, bytes_per_s: float, latency_s: float) -> float:
    """The round trip of the attention's inputs and output between the GPU and the host (two copies)."""
    nbytes = ATTENTION_IO_VECTORS * 2 * unit.hidden * batch * new_tokens
    return 2 * latency_s + nbytes / bytes_per_s


def cpu_attention_extra_s(unit: UnitShape, gpu: GpuSpec, cpu: CpuSpec, step: tuple[int, int, int],
                          link: tuple[float, float]) -> float:
    """What moving one layer's attention to the CPU adds to its time at `step` = (batch, new, context) over a link
    of (bytes_per_s, latency_s): the CPU's attention and the round trip, less the GPU's attention (never below 0)."""
    b, new, ctx = step
    if unit.kv_bytes_per_token == 0:
        return 0.0
    extra = cpu_attention_s(unit, cpu, b, new, ctx) - gpu_attention_s(unit, gpu, b, new, ctx)
    return max(extra, 0.0) + attention_io_s(unit, b, new, *link)
