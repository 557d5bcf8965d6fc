"""Memory accounting of a plan: VRAM, pinned RAM and RAM (the rest is page cache). Refuses impossible plans."""
from __future__ import annotations

from dataclasses import dataclass

from hwmodels.units import GiB, InputError
from sim.costs.equations import STAGED_TIERS
from sim.engines import engine_of
from sim.plan import Budgets, Plan, Workload
from sim.model.shapes import ModelShape



class PlanError(InputError):
    """A plan does not fit its budgets; the message names what is short and the fix."""


@dataclass(frozen=True)
class MemoryUse:
    resident_vram_bytes: int
    staging_vram_bytes: int
    kv_bytes: int
    activation_bytes: int
    pinned_weights_bytes: int
    pinned_staging_bytes: int
    ram_weights_bytes: int
    page_cache_bytes: int
    slot_bytes: int
    host_kv_bytes: int = 0  # the KV cache of the layers computed on the CPU, kept in RAM beside them


    @property
    def vram_bytes(self) -> int:
        return self.resident_vram_bytes + self.staging_vram_bytes + self.kv_bytes + self.activation_bytes

    @property
    def pinned_bytes(self) -> int:
        return self.pinned_weights_bytes + self.pinned_staging_bytes


def kv_cache_bytes(model: ModelShape, w: Workload) -> int:
    """The whole KV cache of a request (every layer's)."""
    return model.kv_bytes_per_token * w.batch * (w.prompt_tokens + w.new_tokens)


def unit_kv_bytes(model: ModelShape, w: Workload) -> list[int]:
    """Each unit's own KV cache over the request, in model order."""
    return [u.kv_bytes_per_token * w.batch * (w.prompt_tokens + w.new_tokens) for u in model.units]


def _prompt_offloads(plan: Plan, w: Workload) -> bool:
    return plan.gpu_offload_min_tokens is not None and w.batch * w.prompt_tokens >= plan.gpu_offload_min_tokens


def offload_kv_copy_bytes(model: ModelShape, plan: Plan, w: Workload) -> int:
    """The largest cache of a CPU-computed layer, 0 unless the prompt offloads: offloadsim's engine multiplies such a
    layer on the GPU for a big step (plan.gpu_offload_min_tokens) with a copy of its cache there, moved through a
    pinned host buffer of one of its K, V (validate/stream_run.py)."""
    if not _prompt_offloads(plan, w):
        return 0
    t = plan.tiers()
    return max((kv for u, kv in zip(model.units, unit_kv_bytes(model, w)) if t[u.name].compute == "cpu"), default=0)


def split_kv_bytes(model: ModelShape, plan: Plan, w: Workload) -> tuple[int, int]:
    """(GPU, RAM) bytes of the KV cache in offloadsim's engine: each layer's cache sits on the device that computes
    it (validate/stream_run.py). While the engine multiplies a CPU-computed layer on the GPU for a big step, that
    layer's cache has a copy on the GPU (one at a time: the largest counts) and half of it in a pinned host buffer
    (offload_kv_copy_bytes)."""
    t = plan.tiers()
    gpu = cpu = 0
    for u, kv in zip(model.units, unit_kv_bytes(model, w)):
        if t[u.name].compute == "cpu":
            cpu += kv
        else:
            gpu += kv
    copy = offload_kv_copy_bytes(model, plan, w)
    return gpu + copy, cpu + copy // 2


def decoder_live_elements(u) -> int:
    """Elements per prompt token held on the device at a dense decoder's peak in offloadsim's engine
    (validate/model.py, decoder_layer, 16 bit): at the MLP's product, the step's hidden state, the block's residual
    and its norm (3 x hidden), the attention's locals still referenced (q, k, v, the output: q + 2 kv + q wide;
    with grouped KV heads, the keys and values repeated to q's heads: 2 q more) and the MLP's SiLU(gate), up and
    their product (3 x intermediate). Measured on the H200 (call M, lab/journal/validation.md): Phi-3-mini's layer 46,080
    elements a token, Qwen3-8B's 67,584, both within 1% of the allocator's peak."""
    h = u.hidden
    q = u.attn_flops_per_ctx_token // 4  # 4 x heads x head_dim (sim/model/from_hf.py, sim/model/families.py)
    kv = u.kv_bytes_per_token // 4       # K and V of 16 bits: 2 x kv_heads x head_dim x 2 bytes
    inter = max((u.flop_params - 2 * h * q - 2 * h * kv) // (3 * h), 0) if h else 0
    return 3 * h + 2 * q + 2 * kv + (2 * q if q != kv else 0) + 3 * inter


def activation_bytes(model: ModelShape, w: Workload) -> int:
    """The prompt's live activations at a block's peak (decoder_live_elements, 16 bit; at least 8 x hidden for
    blocks of other kinds), its token ids (int64), plus the FP32 logits of the last tokens."""
    per_token = max([8 * model.hidden] + [decoder_live_elements(u) for u in model.units if u.kind == "decoder"])
    return w.batch * w.prompt_tokens * (2 * per_token + 8) + 4 * w.batch * model.vocab


def streamed_units(model: ModelShape, plan: Plan, w: Workload | None = None) -> list[str]:
    """Units that pass through VRAM staging slots (GPU-computed and not resident)."""
    t = plan.tiers()
    out = [u.name for u in model.units if t[u.name].tier != "vram" and t[u.name].compute == "gpu"]
    if w and _prompt_offloads(plan, w):
        # the engine's offload of CPU-held weights (llama.cpp's); it looks an embedding's rows up in place instead
        out += [u.name for u in model.units if t[u.name].compute == "cpu" and u.kind != "embedding"]
    return out


def shared_bytes(model: ModelShape, plan: Plan, tier: str) -> int:
    """Bytes a head tied to the embedding shares with it in `tier`, where both are kept there (counted once)."""
    t = plan.tiers()
    if not any(t[u.name].tier == tier for u in model.units if u.kind == "embedding"):
        return 0
    return sum(u.tied_nbytes for u in model.units if t[u.name].tier == tier)


def resident_weight_bytes(model: ModelShape, plan: Plan) -> int:
    """Bytes of the weights resident on the GPU; a head tied to a resident embedding is that one matrix."""
    t = plan.tiers()
    return sum(u.nbytes for u in model.units if t[u.name].tier == "vram") - shared_bytes(model, plan, "vram")


def memory_use(model: ModelShape, plan: Plan, w: Workload, budgets: Budgets) -> MemoryUse:
    """What the plan keeps where. A plan whose engine uses the GPU its own way (Engine.gpu_memory: llama.cpp's
    compute buffer and the KV cache of its GPU layers) is counted that way."""
    t = plan.tiers()
    sizes = {u.name: u.nbytes for u in model.units}
    streamed = streamed_units(model, plan, w)
    slot = max((sizes[n] for n in streamed), default=0)
    own = engine_of(plan.engine).gpu_memory(model, plan, w)  # an engine that uses the GPU its own way
    if own is not None:
        staging, kv, act, slot, host_kv = own
    else:
        staging = plan.vram_slots * slot if streamed else 0
        (kv, host_kv), act = split_kv_bytes(model, plan, w), activation_bytes(model, w)
    staged_host = [n for n in streamed if t[n].tier in STAGED_TIERS]
    pin_slot = max((sizes[n] for n in staged_host), default=0) if plan.pinned_staging else 0
    ratio = plan.codec.ratio if plan.codec else 1.0
    ram_w = sum(sizes[n] for n, p in t.items() if p.tier == "ram_pageable") + \
        int(sum(sizes[n] * ratio for n, p in t.items() if p.tier == "ram_compressed")) - \
        shared_bytes(model, plan, "ram_pageable")
    pinned_w = sum(sizes[n] for n, p in t.items() if p.tier == "ram_pinned") - shared_bytes(model, plan, "ram_pinned")
    # the loaders keep at least one pinned buffer when they stage (sim/run/fast.py, sim/run/timeline.py, validate/engine.py)
    pinned_staging = max(plan.pinned_slots, 1) * pin_slot
    cache = budgets.ram_bytes - ram_w - pinned_w - pinned_staging - host_kv
    return MemoryUse(resident_vram_bytes=resident_weight_bytes(model, plan),
                     staging_vram_bytes=staging, kv_bytes=kv, activation_bytes=act, pinned_weights_bytes=pinned_w,
                     pinned_staging_bytes=pinned_staging, ram_weights_bytes=ram_w, page_cache_bytes=max(cache, 0),
                     slot_bytes=slot, host_kv_bytes=host_kv)


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def check_plan(model: ModelShape, plan: Plan, w: Workload, budgets: Budgets) -> MemoryUse:
    """Refuse a plan that does not match the model or exceed a budget, naming what is short and the fix."""
    names = [u.name for u in model.units]
    placed = [p.unit for p in plan.placements]
    if placed != names:
        missing = sorted(set(names) - set(placed))[:3]
        extra = sorted(set(placed) - set(names))[:3]
        raise PlanError(f"plan: placements do not match model {model.name!r} (missing {missing}, unknown {extra}); "
                        "make the plan for this model.")
    for p in plan.placements:
        if p.compute == "cpu" and p.tier in ("vram", "ram_compressed", "disk_compressed"):
            raise PlanError(f"plan: unit {p.unit!r} is stored in {p.tier} but computed on the cpu, which reads raw "
                            "weights; store it in ram_pinned, ram_pageable or disk_raw.")
        if p.tier.endswith("compressed") and plan.codec is None:
            raise PlanError(f"plan: unit {p.unit!r} uses tier {p.tier!r} but the plan has no codec; add a codec.")
    m = memory_use(model, plan, w, budgets)
    if m.vram_bytes > budgets.vram_bytes:
        engine_of(plan.engine).refuse_vram(m, plan, budgets)  # in the engine's own words where it has them
    if m.vram_bytes > budgets.vram_bytes:
        raise PlanError(f"vram: the plan needs {_gib(m.vram_bytes)} but the budget is {_gib(budgets.vram_bytes)}: "
                        f"resident weights {_gib(m.resident_vram_bytes)} + {plan.vram_slots} staging slots "
                        f"{_gib(m.staging_vram_bytes)} + KV cache {_gib(m.kv_bytes)} + activations "
                        f"{_gib(m.activation_bytes)}; raise --vram or keep fewer weights resident.")
    if m.pinned_bytes > budgets.pinned_bytes:
        raise PlanError(f"pinned: the plan pins {_gib(m.pinned_bytes)} but the budget is {_gib(budgets.pinned_bytes)}; "
                        "move weights to ram_pageable or disk, or raise the pinned budget.")
    used = m.ram_weights_bytes + m.pinned_bytes + m.host_kv_bytes
    if used > budgets.ram_bytes:
        raise PlanError(f"ram: the plan keeps {_gib(used)} in RAM (weights {_gib(m.ram_weights_bytes + m.pinned_bytes)}"
                        f" + KV cache of its CPU layers {_gib(m.host_kv_bytes)}) but the budget is "
                        f"{_gib(budgets.ram_bytes)}; move weights to disk, compute fewer layers on the CPU or raise "
                        "--ram.")
    return m


def min_vram_bytes(model: ModelShape, w: Workload) -> int:
    """The least VRAM any streaming plan can run in: one staging slot for the largest unit, KV cache, activations."""
    return max(u.nbytes for u in model.units) + kv_cache_bytes(model, w) + activation_bytes(model, w)
