"""Compute time of a unit on the GPU or the CPU for one workload step.

Where the machine carries a measured grid for the unit's architecture and kind (calibrate, timed inside the engine),
the time is interpolated from it: linear between measured points, linear extrapolation above the largest, clamped
below the smallest. A CPU grid is first made non-decreasing along its token axes (more prompt tokens or a longer
cache is never less work; a point faster than a shorter one is the host's drift while it was timed, _monotone).
Otherwise the roofline with per-launch overheads, whose parameters carry sources.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy.interpolate import RegularGridInterpolator
from scipy.optimize import isotonic_regression

from hwmodels.profiles import ComputeGrid, UnitSignature
from hwmodels.specs import MachineSpec
from sim.costs.equations import roofline_s
from sim.model.shapes import UnitShape, ggml_ops


def signature(unit: UnitShape, family: str) -> UnitSignature:
    return UnitSignature(family=family, kind=unit.kind, nbytes=unit.nbytes, flop_params=unit.flop_params,
                         attn_flops_per_ctx_token=unit.attn_flops_per_ctx_token, hidden=unit.hidden)


_FIELDS = tuple(f for f in UnitSignature.model_fields if f != "nbytes")
_INDEXES: dict[int, tuple] = {}
BYTES_TOLERANCE = 0.01  # a grid serves a unit whose bytes differ by this share (norms stored as F32 in a GGUF)


def _grid_index(grids: tuple[ComputeGrid, ...]) -> dict[tuple, list[ComputeGrid]]:
    """(device, dispatch, memory, signature fields but the bytes) -> grids, built once per grids tuple (keyed by
    identity; the entry keeps the tuple alive, so the identity cannot be reused while it is cached)."""
    hit = _INDEXES.get(id(grids))
    if hit is None:
        if len(_INDEXES) > 64:
            _INDEXES.clear()
        index: dict[tuple, list[ComputeGrid]] = {}
        for g in grids:
            key = (g.device, g.dispatch, g.memory or _default_memory(g.device)) + tuple(getattr(g.unit, f) for f in _FIELDS)
            index.setdefault(key, []).append(g)
        hit = _INDEXES[id(grids)] = (grids, index)
    return hit[1]


def _default_memory(device: str) -> str:
    """Where a grid that does not record it had its weights: VRAM on the GPU, pageable RAM on the CPU."""
    return "vram" if device == "gpu" else "pageable"


def has_pinned_cpu_grid(machine: MachineSpec) -> bool:
    """Whether the machine has a CPU grid timed with its weights in pinned RAM (else pinned units use the pageable
    one)."""
    return any(g.device == "cpu" and g.memory == "pinned" for g in machine.compute_grids)


def find_grid(machine: MachineSpec, unit: UnitShape, family: str, device: str, dispatch: str = "graph",
              memory: str | None = None) -> ComputeGrid | None:
    """The measured grid of the unit's signature (its bytes within BYTES_TOLERANCE: the same weights stored another
    way, such as a GGUF's F32 norms) on `device`, launched as `dispatch` asks, else the other way; on the CPU with the
    weights where `memory` says (pageable or pinned RAM; default pageable), else the other."""
    if not machine.compute_grids:
        return None
    index = _grid_index(machine.compute_grids)
    sig = tuple(family if f == "family" else getattr(unit, f) for f in _FIELDS)
    other = "eager" if dispatch == "graph" else "graph"
    want = memory or _default_memory(device)
    mems = (want,) if device == "gpu" else (want, "pinned" if want == "pageable" else "pageable")
    for key in ((d, m) for d in (dispatch, other) for m in mems):
        near = [g for g in index.get((device,) + key + sig, ())
                if abs(g.unit.nbytes - unit.nbytes) <= BYTES_TOLERANCE * unit.nbytes]
        if near:
            return min(near, key=lambda g: abs(g.unit.nbytes - unit.nbytes))
    return None


def _monotone(table, device: str) -> np.ndarray:
    """A grid's [batch][tokens] table, on the CPU each row its least-squares non-decreasing fit (pooled adjacent
    violators). The H200 host's memory speed drifts by 30% within a minute (lab/data/peers/cpu-cache.json: GEMV 75-101
    GB/s from one round to the next); calibrate's CPU grids are the median of three rounds and still kept points 28%
    under their neighbours (lab/data/peers/peers-h.json: a Qwen3-14B layer 11.1 ms at a 68-token cache between 15.3 ms
    at 20 and 14.6 ms at 1028), which a run at that cache read as the layer's cost. GPU grids are left as measured:
    their kernels change with the shape (split-K, CUDA-graph buckets) and did not drift."""
    v = np.asarray(table, float)
    return np.array([isotonic_regression(row).x for row in v]) if device == "cpu" else v


@functools.lru_cache(maxsize=256)
def _interpolators(grid: ComputeGrid) -> tuple[RegularGridInterpolator, RegularGridInterpolator]:
    def make(cols, table):
        x, y = np.asarray(grid.batch, float), np.asarray(cols, float)
        v = _monotone(table, grid.device)
        if len(x) == 1:  # a single measured batch: duplicate it so the grid is two-dimensional (flat in batch)
            x, v = np.array([x[0], x[0] + 1.0]), np.vstack([v, v])
        if len(y) == 1:
            y, v = np.array([y[0], y[0] + 1.0]), np.hstack([v, v])
        return RegularGridInterpolator((x, y), v, method="linear", bounds_error=False, fill_value=None)
    return make(grid.prefill_tokens, grid.prefill_s), make(grid.decode_context, grid.decode_s)


def grid_time_s(grid: ComputeGrid, batch: int, new_tokens: int, context: int, scale=None) -> float:
    """Seconds for one unit: prefill(batch, new) with an empty cache, decode(batch, context) for one new token;
    a chunk of several new tokens after a context adds the decode's context cost to the prefill of the chunk.
    Inside the grid: linear interpolation. Above it: the grid's last segment continued along `scale(b, s, k)` (the
    roofline's time) at the slope measured there; below the grid, the nearest point. A CPU prompt longer than the
    grid's longest is read as the same tokens in more sequences of that length where the batch axis covers them
    (_same_tokens_batch), its longer attention (the roofline's FLOPs beyond those prompts') at the time per roofline
    second measured there."""
    pre, dec = _interpolators(grid)

    def at(f, cols, b, y):
        return float(f([[b, y]])[0])

    def clamp(b, new, ctx):
        return (min(max(b, grid.batch[0]), grid.batch[-1]),
                min(max(new, grid.prefill_tokens[0]), grid.prefill_tokens[-1]) if new > 1 else 1,
                min(max(ctx, grid.decode_context[0]), grid.decode_context[-1]) if ctx > 0 else 0)

    def inside(b, new, ctx):
        if ctx == 0 and new > 1:
            return at(pre, grid.prefill_tokens, b, new)
        if new == 1:
            return at(dec, grid.decode_context, b, max(ctx, grid.decode_context[0]))
        return at(pre, grid.prefill_tokens, b, new) + new * max(
            at(dec, grid.decode_context, b, ctx) - at(dec, grid.decode_context, b, grid.decode_context[0]), 0.0)
    cb, cn, cc = clamp(batch, new_tokens, context)
    wide = _same_tokens_batch(grid, batch, new_tokens, context)
    if wide is not None:
        longest = grid.prefill_tokens[-1]
        t = _wide_s(grid, lambda b: at(pre, grid.prefill_tokens, b, longest), wide)
        # the same matrix products; the longer prompt's attention (quadratic in its length) at the rate measured there
        return t if scale is None else t * scale(batch, new_tokens, 0) / scale(wide, longest, 0)
    t = inside(cb, cn, cc)
    if scale is None or not (batch > cb or new_tokens > cn or context > cc):
        return t
    # beyond the grid: continue its last segment along the roofline. k = measured seconds per roofline second
    # between the edge and the point one step inside, so an overhead-bound table stays flat and a compute-bound one
    # grows at its measured efficiency. k lies in [0, t / roofline at the edge] (a measured time is a non-negative
    # fixed part plus k x roofline); where the segment barely moves the roofline (< 10%) or there is no segment,
    # k is that upper end: the ratio to the roofline.
    pb = _inner(grid.batch, cb) if batch > cb else cb
    pn = _inner(grid.prefill_tokens, cn) if new_tokens > cn else cn
    pc = _inner(grid.decode_context, cc) if context > cc else cc
    edge, ask, prev = scale(cb, cn, cc), scale(batch, new_tokens, context), scale(pb, pn, pc)
    ratio = t / edge
    k = (t - inside(pb, pn, pc)) / (edge - prev) if edge - prev > 0.1 * edge else ratio
    return t + min(max(k, 0.0), ratio) * (ask - edge)


def _wide_s(grid: ComputeGrid, at_longest, b: float) -> float:
    """The grid's longest-prompt column at batch `b` (`at_longest(b)`), continued past the batch axis along its last
    segment: at the longest prompt the step is bound by its matrix products, linear in the tokens."""
    top = grid.batch[-1]
    if b <= top or len(grid.batch) < 2:
        return at_longest(min(b, top))
    prev = grid.batch[-2]
    t_top = at_longest(top)
    return t_top + (b - top) * max(t_top - at_longest(prev), 0.0) / (top - prev)


def _same_tokens_batch(grid: ComputeGrid, batch: int, new_tokens: int, context: int) -> float | None:
    """For a CPU prompt (empty cache) longer than the grid's longest, the batch of prompts of that longest length
    that holds as many tokens (past the batch axis continued along its last segment, _wide_s; None for a GPU grid). On the CPU a short prompt's cost is
    its matrix products over all its tokens, whichever sequences they belong to: over the 20 CPU decoder grids of
    lab/data/peers/peers-{c..i}.json, 4 prompts of 16 tokens took a median 2.9% from 1 prompt of 64, and 16 of 16 a
    median 4.3% from 4 of 64 (worst 41 and 31%). Continuing the prompt axis along the roofline instead priced the first
    tokens of Accelerate's exported CPU plans up to 90% over what they measured (peers-{b..g}.json). GPU grids reach
    2048 tokens and keep the roofline's continuation."""
    if grid.device != "cpu" or context or new_tokens <= grid.prefill_tokens[-1]:
        return None
    b = batch * new_tokens / grid.prefill_tokens[-1]
    return b if b >= grid.batch[0] else None


def _inner(axis: tuple[int, ...], edge: int) -> int:
    """The measured point one step inside the grid from its last point `edge` (the edge itself when alone)."""
    return axis[-2] if len(axis) > 1 and edge == axis[-1] else edge


def _roofline(unit: UnitShape, flops_per_s: float, bytes_per_s: float, overhead_s: float):
    def f(b: int, s: int, k: int) -> float:
        return roofline_s(unit.flops(b, s, k), unit.bytes_touched(b, s, k), flops_per_s, bytes_per_s, overhead_s)
    return f


# in-graph against eager overhead per kernel on the H200 test machine: 2.7-3.2 us (decoders' graph grids of
# lab/data/validation/matrix/matrix-{k,l}.json: grid time less bytes / bandwidth, over the layer's launches) against
# 11.69 us eager
GRAPH_OVERHEAD_SHARE = 0.25


def kernel_overhead_s(gpu, dispatch: str) -> float:
    """Per-kernel overhead of a unit launched as `dispatch` says ('graph': replayed from a CUDA graph)."""
    if dispatch != "graph":
        return gpu.kernel_overhead_s
    return gpu.graph_kernel_overhead_s if gpu.graph_kernel_overhead_s is not None \
        else GRAPH_OVERHEAD_SHARE * gpu.kernel_overhead_s


# ggml's CUDA backend computes a step of at most this many tokens with its matrix-vector kernels (ggml-cuda/mmvf.cuh,
# MMVF_MAX_BATCH_SIZE; mmvq.cuh likewise), which stream the weights once; larger steps go to cuBLAS / MMQ
MMV_MAX_TOKENS = 8
# measured on llama.cpp (lab/data/peers/llamacpp-{m,p}.json): a decode step of several tokens (sequences decoded
# together) costs the weights' bytes once plus a cost per row and token that is linear in the tokens all the way,
# through the kernels' switch at 8 and past 32 (48 sequences); a prefill step counts as one up to this many tokens (from
# 32 on ggml also copies CPU-held weights to the GPU to multiply them there: GGML_OP_OFFLOAD_MIN_BATCH)
PEER_DECODE_MAX_TOKENS = 32
# how a peer's CPU streaming and multiplying overlap: the unit takes (stream^p + multiply^p)^(1/p), between their sum
# (p = 1) and the larger (p -> inf). p = 3 fits the calibration runs best (lab/data/peers/llamacpp-m.json, Llama-1B on the
# CPU, 2-16 tokens a step: rms error 6.3% against 6.9% for p = 2 and p = 4)
OVERLAP_NORM = 3


def matrix_rows(unit: UnitShape) -> float:
    """Output rows of the weight matrices a unit multiplies per token, as its multiplied parameters / hidden: exact
    for a hidden-wide matrix (q, k, v, gate, up, the head), and o and down (wider rows) count as more rows of
    hidden width, so a Llama or Qwen3 decoder counts ~1.25x its rows whatever its size."""
    return unit.flop_params / unit.hidden if unit.hidden else 0.0


@dataclass(frozen=True)
class GpuKernels:
    """How an engine's GPU kernels are priced (gpu_compute_s); hashable, so a compute cache can key on it."""
    dispatch: str = "graph"  # 'graph': a captured graph per unit (offloadsim's engine); 'eager' for the peers
    grid_scale: float = 1.0  # the engine's kernels against a measured grid (a roofline, a bound, is never scaled)
    op_s: float | None = None  # another engine's own decode kernels, per operator of its graph (None: the grid)
    row_s: float = 0.0  # per row of the unit's weight matrices (matrix_rows)
    multi_row_s: tuple[float, float] | None = None  # (fixed, per token) per row of a step of several tokens


@dataclass(frozen=True)
class CpuKernels:
    """How an engine's CPU kernels are priced (cpu_compute_s); hashable, so a compute cache can key on it."""
    grid_scale: float = 1.0  # as GpuKernels.grid_scale
    stream_bytes_per_s: float | None = None  # another engine's own streaming speed (None: the machine's grid)
    op_s: float = 0.0  # per operator of its graph
    flops_per_s: float | None = None  # its own multiply rate
    flash_attention: bool = False  # its attention fused
    row_s: float = 0.0  # per output row of its matrices


def gpu_compute_s(unit: UnitShape, machine: MachineSpec, batch: int, new_tokens: int, context: int,
                  family: str = "", kernels: GpuKernels = GpuKernels()) -> float:
    """Seconds of one unit on the GPU. The kernels' fields (GpuKernels): `dispatch`: 'graph' for offloadsim's engine
    (a captured graph per unit), 'eager' for the peers. `grid_scale`: another engine's kernels against a measured grid
    (a roofline, a bound, is never scaled). `op_s`: another engine's own decode kernels (llama.cpp's, measured on it):
    a step of at most MMV_MAX_TOKENS tokens streams the unit's bytes at the GPU's bandwidth and pays `op_s` per
    operator of its graph (sim.model.shapes.ggml_ops) and `row_s` per row of its weight matrices (matrix_rows).
    `multi_row_s` (fixed, per token): a decode step of several sequences, or a prefill step of up to
    PEER_DECODE_MAX_TOKENS tokens, pays this per row instead, fixed + tokens x per token."""
    g, k = machine.gpu, kernels
    op_s, row_s, multi_row_s, dispatch = k.op_s, k.row_s, k.multi_row_s, k.dispatch
    tokens = batch * new_tokens
    if op_s is not None and (tokens <= MMV_MAX_TOKENS
                             or multi_row_s is not None and (new_tokens == 1 or tokens <= PEER_DECODE_MAX_TOKENS)):
        stream = unit.bytes_touched(batch, new_tokens, context) / g.vram_bytes_per_s
        per_row = multi_row_s[0] + tokens * multi_row_s[1] if multi_row_s and tokens > 1 else row_s
        return stream + ggml_ops(unit.kind, family) * op_s + matrix_rows(unit) * per_row
    roof = _roofline(unit, g.bf16_flops_per_s, g.vram_bytes_per_s, unit.launches * kernel_overhead_s(g, dispatch))
    grid = find_grid(machine, unit, family, "gpu", dispatch) if machine.compute_grids else None
    return k.grid_scale * grid_time_s(grid, batch, new_tokens, context, roof) if grid is not None \
        else roof(batch, new_tokens, context)


def cpu_compute_s(unit: UnitShape, machine: MachineSpec, batch: int, new_tokens: int, context: int,
                  family: str = "", memory: str = "pageable", kernels: CpuKernels = CpuKernels()) -> float:
    """Seconds of one unit on the CPU. `memory`: where the unit's weights sit, 'pinned' or 'pageable' host memory
    (each may have its own grid). The kernels' fields (CpuKernels): `grid_scale` as for gpu_compute_s.
    `stream_bytes_per_s`: how fast another engine's own CPU kernels stream weights, measured on that engine: a roofline
    at that speed and the CPU's FLOP rate replaces the machine's grid (llama.cpp's matrix-vector kernels stream a layer
    at one speed whatever its shape, where torch's speed varies by shape), plus `op_s` per operator of its graph
    (sim.model.shapes.ggml_ops: ggml joins its threads after each; its attention fused with `flash_attention`) and
    `row_s` per output row of its matrices (matrix_rows; not the embedding's, whose rows are looked up).
    `flops_per_s`: that engine's own multiply rate, measured on it: streaming and multiplying then overlap only in part,
    and the unit takes their OVERLAP_NORM-norm (measured on llama.cpp, lab/data/peers/llamacpp-m.json: flat to 4 tokens
    a step, then rising towards the multiply's rate), not the larger of the two."""
    c, k = machine.cpu, kernels
    stream_bytes_per_s, op_s, flops_per_s, row_s = k.stream_bytes_per_s, k.op_s, k.flops_per_s, k.row_s
    if stream_bytes_per_s is not None:
        overhead = ggml_ops(unit.kind, family, k.flash_attention) * op_s + (matrix_rows(unit) * row_s
                                                                          if unit.kind != "embedding" else 0.0)
        if flops_per_s is not None:
            b = (batch, new_tokens, context)
            stream, multiply = unit.bytes_touched(*b) / stream_bytes_per_s, unit.flops(*b) / flops_per_s
            return (stream ** OVERLAP_NORM + multiply ** OVERLAP_NORM) ** (1 / OVERLAP_NORM) + overhead
        return _roofline(unit, c.flops_per_s, stream_bytes_per_s, overhead)(batch, new_tokens, context)
    roof = _roofline(unit, c.flops_per_s, c.memory_bytes_per_s, unit.launches * c.op_overhead_s)
    grid = find_grid(machine, unit, family, "cpu", "eager", memory) if machine.compute_grids else None
    return k.grid_scale * grid_time_s(grid, batch, new_tokens, context, roof) if grid is not None \
        else roof(batch, new_tokens, context)


def compute_sources(units, machine: MachineSpec, family: str) -> dict[str, str]:
    """Per unit kind and device: 'profile' when every unit of the kind has a measured grid, else 'roofline'."""
    out: dict[str, str] = {}
    for u in units:
        for dev in ("gpu", "cpu"):
            key = f"{u.kind}@{dev}"
            if out.get(key) != "roofline":
                out[key] = "profile" if find_grid(machine, u, family, dev) is not None else "roofline"
    return out
