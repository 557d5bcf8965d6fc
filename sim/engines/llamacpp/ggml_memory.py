"""llama.cpp's use of GPU memory, as its context reserves it (src/llama-context.cpp, ggml-backend.cpp): the weights
placed on the GPU, the KV cache of the layers there and one compute buffer. `sim.costs.memory.memory_use` takes these for a
plan that llama.cpp runs; its --fit (common/fit.cpp) measures the same three with a dry run of the context.
"""
from __future__ import annotations

from collections import Counter

from sim.plan import Plan, Workload
from sim.model.shapes import ATTENTION_KINDS, GGML_KV_PAD, ModelShape

GGML_BATCH = 2048  # llama.cpp's default logical batch (-b) and micro-batch (-ub): common/common.h
GGML_UBATCH = 512
# FP32 hidden states of the micro-batch live beside the largest tensor of the reserved graph (the residual stream
# and a normed copy; not fitted: llama.cpp's --fit placed what this predicts at 14 of 14 dense budgets of
# lab/data/peers/llamacpp-{ah,ai}.json with 0 to 2 of them)
GGML_LIVE_STATES = 2


def ggml_context(w: Workload) -> tuple[int, int]:
    """(KV cells, micro-batch tokens) of a llama.cpp context made for `w`: a context of the request's tokens,
    B x (P + N), as `--export llamacpp` sets it with -c (the sequences sharing one cache, -kvu), padded to whole
    chunks of 256 cells (llama-context.cpp: GGML_PAD(n_ctx, 256)); its micro-batch the context, at most -b and
    -ub (llama-context.cpp: n_batch = min(n_ctx, n_batch), n_ubatch = min(n_batch, n_ubatch))."""
    ctx = max(w.batch * w.context_tokens, 1)
    return -(-ctx // GGML_KV_PAD) * GGML_KV_PAD, min(ctx, GGML_BATCH, GGML_UBATCH)


def _copied(model: ModelShape, plan: Plan, w: Workload) -> list:
    """The CPU-held units whose weights a micro-batch copies to the GPU: with a micro-batch of at least the plan's
    offload threshold (ggml-cuda.cu: ggml_backend_cuda_device_offload_op) every operator with a CPU-held weight runs
    on the GPU, but an embedding's rows are looked up in place (GET_ROWS is never offloaded)."""
    _, ub = ggml_context(w)
    if not plan.gpu_offload_min_tokens or ub < plan.gpu_offload_min_tokens:
        return []
    t = plan.tiers()
    return [u for u in model.units if t[u.name].compute == "cpu" and u.kind != "embedding"]


def ggml_largest_copy(model: ModelShape, plan: Plan, w: Workload) -> int:
    """The largest weight tensor a micro-batch copies from the CPU to the GPU (_copied): ggml's scheduler multiplies
    each in a split of its own, whose copy the next split's reuses (ggml-backend.cpp, ggml_backend_sched_split_graph),
    so the buffer holds one tensor at a time; a block's routed experts are one fused tensor (ffn_*_exps)."""
    cpu = _copied(model, plan, w)
    fused: Counter[int] = Counter()
    for u in cpu:
        if u.kind == "expert":
            fused[u.block] += u.largest_tensor_bytes
    return max([u.largest_tensor_bytes for u in cpu if u.kind != "expert"] + list(fused.values()), default=0)


# families whose decoder's largest attention matrix is its query's or output's, hidden x (attention FLOPs per context
# token / 4) (sim/model/families.py: grouped-query attention, OPT's); DeepSeek's latent attention is not
GQA_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "opt")


def _attention_matrix(model: ModelShape, u) -> int:
    """The bytes of the largest attention matrix of a unit: its query's or its output's for a dense decoder of
    GQA_FAMILIES, the unit's largest tensor for an MoE's attention unit; 0 where not known."""
    if u.kind == "decoder" and u.attn_flops_per_ctx_token and model.family in GQA_FAMILIES:
        return min(model.weight_format.matrix_nbytes(u.hidden * u.attn_flops_per_ctx_token // 4),
                   u.largest_tensor_bytes)
    return u.largest_tensor_bytes if u.kind == "attention" else 0


def _expert_states(model: ModelShape, u, ub: int) -> int:
    """The FP32 gate and up outputs of the micro-batch's routed experts in an expert's block, its share of
    2 x 4 B x u x k x width (llama-graph.cpp, build_moe_ffn)."""
    width = u.matrix_params // (3 * u.hidden) if u.hidden else 0
    return 2 * 4 * ub * width * model.experts_per_token // max(model.n_routed_experts, 1)


def ggml_block_peak(model: ModelShape, plan: Plan, w: Workload) -> int:
    """The compute buffer's peak at a block. With CPU-held weights (_copied): its attention's largest matrix copied
    first, then its feed-forward's largest (a block's routed experts one fused tensor, with their FP32 gate and up
    outputs, _expert_states). ggml's allocator fits each copy in the smallest free block (ggml-alloc.c, best fit),
    and the attention's copy is freed below hidden states still live, so a larger feed-forward copy goes above that
    hole: the two add up (llama.cpp's own projections, lab/data/peers/llamacpp-{aj,ak}.json: Llama-12B's and
    Phi-3-mini's blocks 50 and 22 MiB above the feed-forward copy alone, their query matrices' 50 and 18 MiB). An MoE
    block on the GPU peaks at its experts' outputs alone (llamacpp-ak.json's Mixtral-like shape: 35 MiB)."""
    _, ub = ggml_context(w)
    t = plan.tiers()
    copied = {u.name for u in _copied(model, plan, w)}
    attention: Counter[int] = Counter()
    ffn: Counter[int] = Counter()
    fused: Counter[int] = Counter()  # a block's copied routed experts, one tensor, and their outputs
    states: Counter[int] = Counter()  # the outputs of a block's routed experts on the GPU
    for u in model.units:
        if u.kind == "expert" and u.name not in copied and t[u.name].compute == "gpu":
            states[u.block] += _expert_states(model, u, ub)
        if u.name not in copied or u.kind == "lm_head":
            continue
        if u.kind == "expert":
            fused[u.block] += u.largest_tensor_bytes + _expert_states(model, u, ub)
        elif u.kind in ("decoder", "attention"):
            attention[u.block] = max(attention[u.block], _attention_matrix(model, u))
            if u.kind == "decoder":
                ffn[u.block] = max(ffn[u.block], u.largest_tensor_bytes)
        else:  # a shared expert, a norm: one tensor at a time
            ffn[u.block] = max(ffn[u.block], u.largest_tensor_bytes)
    def copies(b: int) -> int:  # the feed-forward's copy above the attention's hole, where it is the larger
        f = max(ffn[b], fused[b])
        return f + attention[b] if f > attention[b] else attention[b]
    return max([copies(b) for b in set(ffn) | set(fused) | set(attention)] + list(states.values()), default=0)


def ggml_compute_bytes(model: ModelShape, plan: Plan, w: Workload) -> int:
    """llama.cpp's GPU compute buffer, reserved for a worst-case micro-batch of u tokens (llama-context.cpp,
    graph_reserve): the larger of its peak at the output, the FP32 logits of the u tokens where the output runs on
    the GPU (with the output's weight copied beside them where it is held on the CPU, above the largest attention
    copy's hole: llama.cpp's projections at -ngl 0 ran 33-69 MiB above the copy and logits alone on three dense
    shapes; Qwen3-4B's it puts 14 MiB over), and its peak at a block (ggml_block_peak); with GGML_LIVE_STATES hidden
    states of the u tokens. Nothing when nothing runs on the GPU. Measured against llama.cpp's own projections in
    lab/data/peers/llamacpp-{aj,ak,al}.json."""
    t = plan.tiers()
    _, ub = ggml_context(w)
    head = [u for u in model.units if u.kind == "lm_head"]
    copied_units = _copied(model, plan, w)
    copied = {u.name for u in copied_units}
    on_gpu = any(t[u.name].compute == "gpu" or u.name in copied for u in head)
    head_copy = sum(u.largest_tensor_bytes for u in head if u.name in copied)
    hole = max((_attention_matrix(model, u) for u in copied_units), default=0) if head_copy else 0
    at_head = 4 * model.vocab * ub + head_copy + hole if on_gpu else 0
    peak = max(at_head, ggml_block_peak(model, plan, w))
    return peak + GGML_LIVE_STATES * 4 * ub * model.hidden if peak else 0


def ggml_kv_bytes(model: ModelShape, plan: Plan, w: Workload, device: str = "gpu") -> int:
    """The KV cache on the GPU (or, device='cpu', in RAM): each layer's cache is kept with the layer
    (llama-kv-cache.cpp, offload_kqv), so only the cells of the attention computed there."""
    t = plan.tiers()
    cells, _ = ggml_context(w)
    return cells * sum(u.kv_bytes_per_token for u in model.units
                       if u.kind in ATTENTION_KINDS and t[u.name].compute == device)
