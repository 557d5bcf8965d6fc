"""Memory accounting of a plan: VRAM, pinned RAM and RAM (the rest is page cache). Refuses impossible plans."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hwmodels.units import GiB, InputError
from sim.costs.tiers import TIER_ROWS, TIERS, tier_column
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
    pinned_kv_bytes: int = 0  # a KV cache placed in pinned RAM (Plan.kv 'pinned')

    @property
    def vram_bytes(self) -> int:
        return self.resident_vram_bytes + self.staging_vram_bytes + self.kv_bytes + self.activation_bytes

    @property
    def pinned_bytes(self) -> int:
        return self.pinned_weights_bytes + self.pinned_staging_bytes + self.pinned_kv_bytes


@dataclass(frozen=True)
class UnitBytes:
    """A model's units for a workload, as arrays in model order: weight bytes, KV-cache bytes over the request (0
    without a workload), which are embeddings, and the bytes each shares with another unit (a tied head's)."""
    nbytes: np.ndarray
    kv: np.ndarray
    embedding: np.ndarray
    tied: np.ndarray


def unit_bytes(model: ModelShape, w: Workload | None) -> UnitBytes:
    units = model.units
    kv = unit_kv_bytes(model, w) if w is not None else [0] * len(units)
    return UnitBytes(nbytes=np.array([u.nbytes for u in units], dtype=np.int64), kv=np.array(kv, dtype=np.int64),
                     embedding=np.array([u.kind == "embedding" for u in units], dtype=bool),
                     tied=np.array([u.tied_nbytes for u in units], dtype=np.int64))


@dataclass(frozen=True)
class HeldBytes:
    """What a placement holds, before the loader's settings: weights resident in VRAM, in pageable RAM (compressed
    at their stored size) and in pinned RAM; the KV cache on the GPU and in RAM and the largest CPU layer's; the
    largest unit through a VRAM slot and through a pinned staging slot, without and with the prompt's offload of
    CPU-held units to the GPU (indexed by that flag)."""
    resident_vram: int
    ram_weights: int
    pinned_weights: int
    kv_gpu: int
    kv_cpu: int
    kv_copy: int
    slot: tuple[int, int]
    pin_slot: tuple[int, int]


# per tier (index of TIERS): the facts of its row the accounting reads
RESIDENT, PINNED_HOME, STAGED, COMPRESSED = (tier_column(f) for f in ("resident", "pinned_home", "staged", "compressed"))
PAGEABLE_RAW = (tier_column("home") == "pageable") & ~COMPRESSED
PAGEABLE_PACKED = (tier_column("home") == "pageable") & COMPRESSED


def tier_codes(plan: Plan) -> np.ndarray:
    """Each placement's tier as its index in TIERS (the rows of the tier columns)."""
    index = {t: i for i, t in enumerate(TIERS)}
    return np.array([index[p.tier] for p in plan.placements], dtype=np.int64)


def _shared(ub: UnitBytes, held: np.ndarray) -> int:
    """Bytes a tied head shares with an embedding where both are among `held` (counted once: sim.model.shapes)."""
    return int(ub.tied[held].sum()) if (held & ub.embedding).any() else 0


def _largest(nbytes: np.ndarray, mask: np.ndarray) -> int:
    return int(nbytes[mask].max(initial=0))


def held_bytes(ub: UnitBytes, codes: np.ndarray, on_cpu: np.ndarray, ratio: float) -> HeldBytes:
    """The placement (tier codes, CPU mask) of `ub`'s units, with compressed tiers kept at `ratio` of their bytes.
    A unit streams through a VRAM slot when computed on the GPU and not resident; with the prompt's offload, every
    CPU-held unit but an embedding (its rows are looked up in place) does too. Staged tiers take a pinned slot."""
    nb = ub.nbytes
    resident, pinned, raw, packed = (col[codes] for col in (RESIDENT, PINNED_HOME, PAGEABLE_RAW, PAGEABLE_PACKED))
    packed_bytes = np.cumsum(nb[packed] * ratio)  # summed in model order, one unit after another
    ram = int(nb[raw].sum()) + int(packed_bytes[-1] if len(packed_bytes) else 0) - _shared(ub, raw)
    streamed = (~resident & ~on_cpu, (~resident & ~on_cpu) | (on_cpu & ~ub.embedding))
    staged = STAGED[codes]
    return HeldBytes(resident_vram=int(nb[resident].sum()) - _shared(ub, resident), ram_weights=ram,
                     pinned_weights=int(nb[pinned].sum()) - _shared(ub, pinned),
                     kv_gpu=int(ub.kv[~on_cpu].sum()), kv_cpu=int(ub.kv[on_cpu].sum()),
                     kv_copy=_largest(ub.kv, on_cpu),
                     slot=tuple(_largest(nb, s) for s in streamed),
                     pin_slot=tuple(_largest(nb, s & staged) for s in streamed))


class Loader(NamedTuple):
    """The loader settings memory depends on: VRAM and pinned staging slots, whether the prompt's step multiplies
    CPU-held units on the GPU, whether host copies are staged through pinned slots."""
    vram_slots: int
    pinned_slots: int
    offload: bool
    pinned_staging: bool = True


def account(held: HeldBytes, loader: Loader, activation: int, ram_budget: int) -> MemoryUse:
    """The memory use of a placement under `loader`'s settings; the RAM the budget leaves is page cache. With the
    prompt's offload the largest CPU layer's cache has a copy on the GPU and half of it in a pinned host buffer; the
    loaders keep at least one pinned buffer when they stage (sim/run/fast.py, sim/run/timeline.py, validate/engine.py)."""
    off = int(loader.offload)
    kv = held.kv_gpu + (held.kv_copy if off else 0)
    host_kv = held.kv_cpu + (held.kv_copy // 2 if off else 0)
    slot = held.slot[off]
    pin_slot = held.pin_slot[off] if loader.pinned_staging else 0
    pinned_staging = max(loader.pinned_slots, 1) * pin_slot
    cache = ram_budget - held.ram_weights - held.pinned_weights - pinned_staging - host_kv
    return MemoryUse(resident_vram_bytes=held.resident_vram, staging_vram_bytes=loader.vram_slots * slot,
                     kv_bytes=kv, activation_bytes=activation, pinned_weights_bytes=held.pinned_weights,
                     pinned_staging_bytes=pinned_staging, ram_weights_bytes=held.ram_weights,
                     page_cache_bytes=max(cache, 0), slot_bytes=slot, host_kv_bytes=host_kv)


def shortfall(m: MemoryUse, budgets: Budgets) -> str | None:
    """The first budget the use exceeds ('vram', 'pinned', 'ram'), or None when it fits."""
    if m.vram_bytes > budgets.vram_bytes:
        return "vram"
    if m.pinned_bytes > budgets.pinned_bytes:
        return "pinned"
    if m.ram_weights_bytes + m.pinned_bytes + m.host_kv_bytes > budgets.ram_bytes:
        return "ram"
    return None


def kv_cache_bytes(model: ModelShape, w: Workload) -> int:
    """The whole KV cache of a request (every layer's)."""
    return model.kv_bytes_per_token * w.batch * w.context_tokens


def unit_kv_bytes(model: ModelShape, w: Workload) -> list[int]:
    """Each unit's own KV cache over the request, in model order."""
    return [u.kv_bytes_per_token * w.batch * w.context_tokens for u in model.units]


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


def decoder_live_elements(u) -> int:
    """Elements per prompt token held on the device at a dense decoder's peak in offloadsim's engine
    (validate/model.py, decoder_layer, 16 bit): at the MLP's product, the step's hidden state, the block's residual
    and its norm (3 x hidden), the attention's locals still referenced (q, k, v, the output: q + 2 kv + q wide;
    with grouped KV heads, the keys and values repeated to q's heads: 2 q more) and the MLP's SiLU(gate), up and
    their product (3 x intermediate). Measured on the H200 (lab/journal/validation.md): Phi-3-mini's layer 46,080
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
    out = [u.name for u in model.units if not TIER_ROWS[t[u.name].tier].resident and t[u.name].compute == "gpu"]
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
    ub = unit_bytes(model, None)
    return held_bytes(ub, tier_codes(plan), np.zeros(len(ub.nbytes), bool), 1.0).resident_vram


def memory_use(model: ModelShape, plan: Plan, w: Workload, budgets: Budgets) -> MemoryUse:
    """What the plan keeps where (held_bytes, account). A plan whose engine uses the GPU its own way
    (Engine.gpu_memory: llama.cpp's compute buffer with the activations in it, and the KV cache of its GPU layers)
    is counted that way."""
    on_cpu = np.array([p.compute == "cpu" for p in plan.placements], dtype=bool)
    loader = Loader(plan.vram_slots, plan.pinned_slots, _prompt_offloads(plan, w), plan.pinned_staging)
    if plan.devices is not None or plan.kv_home != "vram":
        return max(device_uses(model, plan, w, budgets), key=lambda m: m.vram_bytes)
    held = held_bytes(unit_bytes(model, w), tier_codes(plan), on_cpu, plan.codec.ratio if plan.codec else 1.0)
    own = engine_of(plan.engine).gpu_memory(model, plan, w)
    if own is None:
        return account(held, loader, activation_bytes(model, w), budgets.ram_bytes)
    staging, kv, act, slot, host_kv = own
    m = account(dataclasses.replace(held, kv_gpu=0, kv_cpu=host_kv, kv_copy=0), loader, act, budgets.ram_bytes)
    return dataclasses.replace(m, staging_vram_bytes=staging, kv_bytes=kv, slot_bytes=slot)


def device_uses(model: ModelShape, plan: Plan, w: Workload, budgets: Budgets) -> list[MemoryUse]:
    """The memory use of each GPU of a plan over several GPUs or with its KV cache placed in RAM: each GPU's VRAM
    (its units' resident weights, its staging slots, the KV cache it holds, the activations), and in every entry
    the host's totals (RAM and pinned weights, KV cache in RAM, pinned staging slots: one pool) and the page cache the
    RAM budget leaves. A KV cache copied from RAM needs on its GPU the largest layer's twice (the copy as it
    arrives and the layer's cache it fills, validate/stream_run.py)."""
    on_cpu = np.array([p.compute == "cpu" for p in plan.placements], dtype=bool)
    ub, codes, ratio = unit_bytes(model, w), tier_codes(plan), plan.codec.ratio if plan.codec else 1.0
    devices = np.array(plan.devices if plan.devices is not None else [0] * len(codes), dtype=np.int64)
    loader = Loader(plan.vram_slots, plan.pinned_slots, _prompt_offloads(plan, w), plan.pinned_staging)
    kv_home, uses = plan.kv_home, []
    own = engine_of(plan.engine).gpu_memory(model, plan, w)  # an engine's own activations (llama.cpp's buffer)
    activation = own[2] if own is not None else activation_bytes(model, w)
    for g in range(int(devices.max(initial=0)) + 1):
        mask = devices == g
        held = held_bytes(UnitBytes(ub.nbytes[mask], ub.kv[mask], ub.embedding[mask], ub.tied[mask]), codes[mask],
                          on_cpu[mask], ratio)
        placed = 0 if kv_home == "vram" else held.kv_gpu
        if placed:
            buffer = 0 if kv_home == "cpu" else 2 * _largest(ub.kv[mask], ~on_cpu[mask])
            held = dataclasses.replace(held, kv_gpu=buffer, kv_cpu=held.kv_cpu + (placed if kv_home != "pinned" else 0))
        m = account(held, loader, activation, budgets.ram_bytes)
        uses.append(dataclasses.replace(m, pinned_kv_bytes=placed if kv_home == "pinned" else 0))
    staging = max(m.pinned_staging_bytes for m in uses)
    host = {f: sum(getattr(m, f) for m in uses) for f in ("pinned_weights_bytes", "ram_weights_bytes",
                                                          "host_kv_bytes", "pinned_kv_bytes")}
    cache = budgets.ram_bytes - staging - sum(host.values())
    return [dataclasses.replace(m, pinned_staging_bytes=staging, page_cache_bytes=max(cache, 0), **host) for m in uses]


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
        row = TIER_ROWS[p.tier]
        if p.compute == "cpu" and not row.cpu_computable:
            *some, last = (t for t, r in TIER_ROWS.items() if r.cpu_computable)
            raise PlanError(f"plan: unit {p.unit!r} is stored in {p.tier} but computed on the cpu, which reads raw "
                            f"weights; store it in {', '.join(some)} or {last}.")
        if row.compressed and plan.codec is None:
            raise PlanError(f"plan: unit {p.unit!r} uses tier {p.tier!r} but the plan has no codec; add a codec.")
    m = memory_use(model, plan, w, budgets)
    short = shortfall(m, budgets)
    if short == "vram":
        engine_of(plan.engine).refuse_vram(m, plan, budgets)  # in the engine's own words where it has them
    if short is not None:
        raise PlanError(_shortfall_message(short, m, plan, budgets))
    return m


def _shortfall_message(short: str, m: MemoryUse, plan: Plan, budgets: Budgets) -> str:
    """One sentence: the budget `short` (shortfall), what the plan needs of it and the fix."""
    if short == "vram":
        return (f"vram: the plan needs {_gib(m.vram_bytes)} but the budget is {_gib(budgets.vram_bytes)}: "
                f"resident weights {_gib(m.resident_vram_bytes)} + {plan.vram_slots} staging slots "
                f"{_gib(m.staging_vram_bytes)} + KV cache {_gib(m.kv_bytes)} + activations "
                f"{_gib(m.activation_bytes)}; raise --vram or keep fewer weights resident.")
    if short == "pinned":
        return (f"pinned: the plan pins {_gib(m.pinned_bytes)} but the budget is {_gib(budgets.pinned_bytes)}; "
                "move weights to ram_pageable or disk, or raise the pinned budget.")
    used = m.ram_weights_bytes + m.pinned_bytes + m.host_kv_bytes
    return (f"ram: the plan keeps {_gib(used)} in RAM (weights {_gib(m.ram_weights_bytes + m.pinned_bytes)}"
            f" + KV cache of its CPU layers {_gib(m.host_kv_bytes)}) but the budget is "
            f"{_gib(budgets.ram_bytes)}; move weights to disk, compute fewer layers on the CPU or raise --ram.")


def min_vram_bytes(model: ModelShape, w: Workload) -> int:
    """The least VRAM any streaming plan can run in: one staging slot for the largest unit, KV cache, activations."""
    return max(u.nbytes for u in model.units) + kv_cache_bytes(model, w) + activation_bytes(model, w)
