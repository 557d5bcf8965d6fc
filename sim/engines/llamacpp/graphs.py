"""llama.cpp's graph as it prices: which attentions it fuses, how fast its own CPU kernels stream a unit, and the
decode steps on which its CUDA graphs warm up."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.model.shapes import ATTENTION_KINDS, GGML_KV_PAD, ModelShape
from sim.plan import Plan, Workload
from sim.run.steps import step_shape


def ggml_flash_attention(model: ModelShape, plan: Plan, gpu_kernels: bool, mode: str = "auto") -> dict[str, bool]:
    """Whether llama.cpp computes its attentions fused (flash_attn_ext, sim.model.shapes.ggml_ops), per device. `mode` is
    its -fa (LlamacppCosts.flash_attn); 'auto', the default, turns it on for every layer unless some layer's fused
    attention would run on another device than the layer's own (llama-context.cpp, resolve_fused_ops). A build
    without ggml-cuda's kernels (`gpu_kernels`, LlamacppCosts.flash_attention, false) so turns it off for all layers once
    one attention is on the GPU, and keeps it on when none is (-ngl 0). The GPU fuses only with its kernels. Another
    engine's plan is not ggml's graph: nothing of it is priced unfused."""
    if plan.engine != "llamacpp":  # this package's own name
        return {"cpu": True, "gpu": True}
    gpu = gpu_kernels and mode != "off"
    if mode != "auto":
        return {"cpu": mode == "on", "gpu": gpu}
    t = plan.tiers()
    on_gpu = any(u.kind in ATTENTION_KINDS and t[u.name].compute == "gpu" for u in model.units)
    return {"cpu": gpu_kernels or not on_gpu, "gpu": gpu}


def cpu_stream_bytes_per_s(model: ModelShape, plan: Plan, machine: MachineSpec, peer,
                           kind: str = "decoder") -> float | None:
    """The speed a peer's own CPU kernels stream a unit of this kind at in this plan: from the last-level cache when
    every weight the CPU computes with fits in its share of it (read each token, they stay there; a larger share
    when every unit is on the CPU), else from memory
    (the head at its own speed where the peer has one and the unit before it is on the CPU too, on a dense model: where
    it was fitted; after an MoE's CPU layers the head streams at the layers' speed, llamacpp-{ab..ag}.json, no mechanism
    found); None when the peer's CPU is priced by the grids instead. The embedding is a row lookup: it touches one row
    per token."""
    if peer is None or peer.cpu_bytes_per_s is None:
        return None
    t = plan.tiers()
    memory = peer.cpu_bytes_per_s
    if kind == "lm_head" and peer.cpu_head_bytes_per_s and not model.is_moe:
        before = [u for u in model.units if u.kind != "lm_head"][-1]
        memory = peer.cpu_head_bytes_per_s if t[before.name].compute == "cpu" else memory
    llc = machine.cpu.llc_bytes
    if peer.cpu_cache_bytes_per_s is None or not llc:
        return memory
    cpu_bytes = sum(u.nbytes for u in model.units if t[u.name].compute == "cpu" and u.kind != "embedding")
    alone = all(t[u.name].compute == "cpu" for u in model.units)  # no GPU in the token's path (llama.cpp's -ngl 0)
    share = peer.cpu_cache_share_alone if alone else peer.cpu_cache_share
    return peer.cpu_cache_bytes_per_s if 0 < cpu_bytes <= share * llc else memory


GRAPH_WARMUP_STEPS = 2  # llama.cpp's CUDA backend: a graph whose shapes changed runs eagerly, then is captured


def graph_warmup_steps(w: Workload) -> list[int]:
    """The decode steps on which llama.cpp's CUDA backend warms a graph up (GRAPH_WARMUP_STEPS each): from the first
    after the prompt (its graph had other shapes) and from each step at which the cells of the KV cache the sequences
    share, rounded up to GGML_KV_PAD, grow (the attention's views change shape). A run that follows an identical one
    (llama-bench's repetitions) finds its graph captured: the caller leaves the cost out."""
    out: set[int] = set()
    cells = None
    for s in range(1, w.new_tokens):
        new, ctx = step_shape(w, False, s)
        now = -(-w.batch * (ctx + new) // GGML_KV_PAD)
        if now != cells:
            out.update(range(s, min(s + GRAPH_WARMUP_STEPS, w.new_tokens)))
        cells = now
    return sorted(out)
