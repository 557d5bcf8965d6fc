"""The execution sequence shared by the SimPy timeline and the fast evaluator.

Each item is one unit computed at one step (token). Loads (read -> unpack -> copy) and compute durations are
precomputed here; only page-cache hits depend on the order of reads, which both engines replay identically.
"""
from __future__ import annotations

import functools
from collections import OrderedDict

import numpy as np

from hwmodels.specs import MachineSpec
from sim.costs.compute import compute_sources, cpu_compute_s, gpu_compute_s
from sim.costs.equations import STAGED_TIERS, copy_time_s, kv_host_copy_s, kv_move_s, unpack_time_s
from sim.costs.memory import check_plan
from sim.plan import Budgets, Plan, Workload
from sim.model.routing import ExpertRouter
from sim.model.shapes import (ATTENTION_KINDS, GGML_KV_PAD, GGML_MOE_WEIGHTS, ModelShape, UnitShape, ggml_moe_ops,
                        ggml_ops, ggml_weights, param_modules)
from sim.run.items import COLUMNS, CPU_READ, GPU_LOAD, ROW_NAMES, Schedule
from sim.run.reads import cache_found, warm_contents

# airllm 4.0 `max_pinned_layer_bytes`: a module's load is pinned only up to this size; a larger one stays the mapped
# file's pages, copied to the GPU from there
AIRLLM_PIN_LIMIT_BYTES = 2 * 2**30
MMAP_HIT_BYTES_PER_S = 1e15  # a mapped page-cache hit where the host's map speed is not measured: no cost of its own


def build_schedule(model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload, budgets: Budgets) -> Schedule:
    """Check the plan against the budgets and lay out every item of the request."""
    mem = check_plan(model, plan, w, budgets)
    units = model.units
    peer = machine.peers.get(plan.engine) if plan.engine != "offloadsim" else None
    st = machine.storage
    sch = Schedule(names=[u.name for u in units], n_steps=w.new_tokens, memory=mem,
                   startup_s=machine.engine.stream_startup_s if peer is None else 0.0,
                   contention=machine.cpu.copy_contention,
                   read_latency_s=st.request_latency_s, cold_bytes_per_s=st.cold_read_bytes_per_s,
                   cache_bytes_per_s=(machine.host_memory.map_touch_bytes_per_s or MMAP_HIT_BYTES_PER_S)
                   if peer is not None and peer.mmap_reads else st.cache_read_bytes_per_s,
                   cache_capacity_bytes=mem.page_cache_bytes)
    cache = _compute_cache(model, machine)
    sch.compute_sources = compute_sources(units, machine, model.family)

    dispatch = "graph" if peer is None else peer.gpu_dispatch  # offloadsim's engine replays a CUDA graph per unit

    # a peer's cost per token around its layers: transformers' generate loop (Accelerate) runs on either device (on
    # the 2-core development machine it took 5.6 ms a token of a CPU run, lab/data/peers/cpu-layer-devbox.json);
    # llama.cpp's was measured on tokens that use the GPU
    pays_step = plan.engine == "accelerate" or any(p.compute == "gpu" for p in plan.placements)
    t = plan.tiers()
    memory = ["pinned" if t[u.name].tier == "ram_pinned" else "pageable" for u in units]  # where a CPU unit reads
    # a peer's own kernels against the measured grids
    scale = {True: peer.cpu_compute_scale, False: peer.gpu_compute_scale} if peer is not None else {True: 1.0, False: 1.0}
    stream = {kind: cpu_stream_bytes_per_s(model, plan, machine, peer, kind) for kind in ("decoder", "lm_head")}
    op_s = {True: peer.cpu_op_s, False: peer.gpu_op_s} if peer is not None else {True: 0.0, False: None}
    row_s = peer.gpu_row_s if peer is not None else 0.0
    cpu_row_s = peer.cpu_row_s if peer is not None else 0.0
    multi = (peer.gpu_multi_row_s, peer.gpu_row_token_s) \
        if peer is not None and peer.gpu_row_token_s is not None else None
    cpu_flops = peer.cpu_flops_per_s if peer is not None else None

    last_only = peer is not None and peer.head_last_position
    # llama.cpp's op offload: a CPU-held unit multiplied on the GPU keeps its attention on the CPU, with its KV cache
    # (the GPU price of the unit still counts its attention there too: small beside the copy at these step sizes)
    offloaded = [peer is not None and plan.engine == "llamacpp" and t[u.name].compute == "cpu"
                 and u.kind != "embedding" for u in units]
    # offloadsim's engine multiplying a CPU-held layer on the GPU moves its cache there and the step's part back
    kv_moved = [peer is None and t[u.name].compute == "cpu" for u in units]
    split = peer.gpu_offload_split_s if peer is not None else 0.0
    pinned_split = peer.gpu_offload_split_pinned_s if peer is not None else None
    split_of = [pinned_split if m == "pinned" and pinned_split is not None else split for m in memory]
    prompt_split = peer.gpu_offload_split_prompt_s if peer is not None else None
    # a prompt's step: the mapped weights' own split cost where the peer has one
    prompt_split_of = [prompt_split if m == "pageable" and prompt_split is not None else x
                       for m, x in zip(memory, split_of)]
    attn_flops = (cpu_flops or machine.cpu.flops_per_s) if peer is not None else 0.0

    # llama.cpp's CUDA graphs: a step that warms one up launches its GPU units' operators one by one
    warmup_op_s = peer.gpu_graph_warmup_op_s if peer is not None and dispatch == "graph" else 0.0
    warmup = set(graph_warmup_steps(w)) if warmup_op_s > 0 else set()
    warmup_s = [warmup_op_s * ggml_ops(u.kind, model.family) if t[u.name].compute == "gpu" else 0.0 for u in units]
    # an attention of a one-token step computed unfused: on the GPU, a build without fused kernels; on the CPU,
    # llama.cpp's flash attention turned off (ggml_flash_attention)
    fused = ggml_flash_attention(model, plan, peer.flash_attention, peer.flash_attn) if peer is not None \
        else {"cpu": True, "gpu": True}
    mm_attention = {cpu: [getattr(peer, f"{dev}_mm_attention_s") if peer is not None and not fused[dev]
                          and u.kind in ATTENTION_KINDS else 0.0 for u in units]
                    for cpu, dev in ((False, "gpu"), (True, "cpu"))}

    moe_ops = ggml_moe_ops(model.experts_per_token) if model.is_moe and peer is not None else 0
    expert_s = peer.gpu_moe_expert_s if peer is not None else 0.0

    def moe_block_s(ui: int, cpu: bool, s: int, decode: bool) -> float:
        """A peer's operators of a block's routed experts (sim.model.shapes.ggml_moe_ops), priced with its first expert to
        run in the step: on the device that runs them, a split per fused weight when offloaded, a graph warm-up."""
        op = op_s[cpu] or 0.0
        split_s = (split_of if decode else prompt_split_of)[ui]
        return moe_ops * (op + (warmup_op_s if not cpu and s in warmup and t[units[ui].name].compute == "gpu"
                                else 0.0)) + (split_s * GGML_MOE_WEIGHTS if offloaded[ui] and not cpu else 0.0) \
            + (expert_s * model.n_routed_experts if not cpu and decode else 0.0)

    def compute_time(ui: int, cpu: bool, batch: int, new: int, ctx: int, s: int = 0,
                     first_expert: bool = False) -> float:
        # a decode step: one token of each sequence (an expert's rows are the tokens routed to it, one each)
        decode = _step_shape(w, peer is None, s)[0] == 1
        block = moe_block_s(ui, cpu, s, decode) if first_expert and moe_ops else 0.0
        if offloaded[ui] and not cpu:  # ggml_weights splits of its own, the attention over the shared cache's cells
            split_s = (split_of if decode else prompt_split_of)[ui]
            return _compute_time(ui, cpu, batch, new, ctx) + split_s * ggml_weights(units[ui].kind, model.family) \
                + units[ui].ggml_attention_flops(batch, new, ctx) / attn_flops + block
        moved = offload_kv_move_s(units[ui], machine, w, s) if kv_moved[ui] and not cpu else 0.0
        return _compute_time(ui, cpu, batch, new, ctx) + (warmup_s[ui] if s in warmup else 0.0) \
            + (mm_attention[cpu][ui] if batch * new == 1 else 0.0) + block + moved

    def _compute_time(ui: int, cpu: bool, batch: int, new: int, ctx: int) -> float:
        # the unit index names its shape, kind and family within one model
        if last_only and units[ui].kind == "lm_head":  # logits of the last position of each sequence only
            new, ctx = 1, ctx + new - 1
        speed = stream["lm_head" if units[ui].kind == "lm_head" else "decoder"] if cpu else None
        key = (ui, cpu, batch, new, ctx, dispatch, memory[ui] if cpu else "", scale[cpu], speed, op_s[cpu],
               (cpu_flops, fused["cpu"], cpu_row_s) if cpu else (row_s, multi))
        if key not in cache:
            cache[key] = cpu_compute_s(units[ui], machine, batch, new, ctx, model.family, memory[ui], scale[cpu],
                                       speed, op_s[cpu], cpu_flops, fused["cpu"], cpu_row_s) \
                if cpu else gpu_compute_s(units[ui], machine, batch, new, ctx, model.family, dispatch, scale[cpu],
                                          op_s[cpu], row_s, multi)
        return cache[key]

    row = _row_maker(model, plan, machine, peer, pays_step, w)
    rows = {False: [row(i, False) for i in range(len(units))]}
    shape_of = functools.partial(_step_shape, w, peer is None)
    if not model.is_moe:  # dense: every step runs every unit in order, so a step's columns are the unit rows
        _dense_steps(sch, rows, row, compute_time, len(units), w, plan, shape_of)
    else:
        _moe_steps(sch, rows, row, compute_time, model, plan, w, shape_of)
    sch.link_at_s = np.full(len(sch.unit), -1.0)
    sch.fault_s = np.zeros(len(sch.unit))
    sch.finalize()
    for k in np.flatnonzero(np.array(kv_moved)[sch.unit] & ~sch.on_cpu).tolist():
        sch.link_at_s[k] = link_at_s(units[int(sch.unit[k])], machine, w, int(sch.step[k]))
    if w.warm:
        sch.warm_keys = warm_contents(sch)
    if plan.engine == "airllm" and peer is not None and not model.is_moe:
        airllm_cold_waits(sch, model, machine, peer.load_unit_s)
    return sch


def airllm_cold_waits(sch: Schedule, model: ModelShape, machine: MachineSpec, cleanup_s: float) -> None:
    """AirLLM's loader reads a module by faulting its mapped pages in while it pins them, so a read that misses the
    page cache lengthens the pin copies the hook waits for (airllm_loader_wait_s with the item's missed share); the
    first streamed module of the request waits for its whole read. Which bytes miss depends only on the order of
    reads (sim.run.fast.cache_found). Warm reads keep the row's wait."""
    found, _, _ = cache_found(sch)
    sch.loader_faults = True
    loads = np.flatnonzero((sch.load == GPU_LOAD) & (sch.read_bytes > 0))
    for k in loads.tolist():
        miss = 1.0 - found[k] / sch.read_bytes[k]
        if miss <= 0:
            continue
        u, copy = model.units[int(sch.unit[k])], float(sch.copy_s[k])
        # an unpinned module (over AirLLM's pin limit) is faulted in by the main thread's copy to the GPU: all of it;
        # never less than the row's warm wait (a first module that the page cache mostly holds)
        whole = k == loads[0] or not airllm_pins(u)
        sch.fault_s[k] = max(0.0, airllm_loader_wait_s(u, machine, copy, miss, cleanup_s, whole=whole)
                             - (airllm_loader_wait_s(u, machine, copy, 0.0, cleanup_s) if airllm_pins(u) else 0.0))
        sch.overhead_s[k] += sch.fault_s[k]


def offload_kv_move_s(unit, machine: MachineSpec, w: Workload, s: int) -> float:
    """offloadsim's engine multiplying a CPU-held unit on the GPU for step `s`: the cache written before the step
    goes to the GPU, the step's own keys and values come back (sim.costs.equations.kv_move_s)."""
    kv = unit.kv_bytes_per_token * w.batch
    return kv_move_s(kv * (w.prompt_tokens + s - 1 if s else 0), machine) + \
        kv_move_s(kv * (1 if s else w.prompt_tokens), machine)


def link_at_s(unit, machine: MachineSpec, w: Workload, s: int) -> float:
    """When, into an offloaded unit's compute at step `s`, its cache's first transfer to the GPU needs the link:
    after the host copy of its keys (validate/stream_run.py, move_kv). -1 for a step with nothing written before."""
    if s == 0 or not unit.kv_bytes_per_token:
        return -1.0
    return kv_host_copy_s(unit.kv_bytes_per_token * w.batch * (w.prompt_tokens + s - 1) / 2, machine)


def ggml_flash_attention(model: ModelShape, plan: Plan, gpu_kernels: bool, mode: str = "auto") -> dict[str, bool]:
    """Whether llama.cpp computes its attentions fused (flash_attn_ext, sim.model.shapes.ggml_ops), per device. `mode` is
    its -fa (PeerSpec.flash_attn); 'auto', the default, turns it on for every layer unless some layer's fused
    attention would run on another device than the layer's own (llama-context.cpp, resolve_fused_ops). A build
    without ggml-cuda's kernels (`gpu_kernels`, PeerSpec.flash_attention, false) so turns it off for all layers once
    one attention is on the GPU, and keeps it on when none is (-ngl 0). The GPU fuses only with its kernels. Another
    engine's plan is not ggml's graph: nothing of it is priced unfused."""
    if plan.engine != "llamacpp":
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
    (the head at its own speed where the peer has one and the unit before it is on the CPU too, on a dense model:
    where it was fitted; after an MoE's CPU layers the head streams at the layers' speed, calls AB-AG, no mechanism
    found); None when the peer's CPU is priced by the grids instead. The embedding is a row lookup: it touches one
    row per token."""
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


def _row_maker(model: ModelShape, plan: Plan, machine: MachineSpec, peer, pays_step: bool, w: Workload):
    """row(unit index, offload) -> the unit's step-invariant columns (_unit_row)."""
    units, t, tied = model.units, plan.tiers(), model.tied_head

    def row(ui: int, offload: bool) -> tuple:
        # rows of a CPU-held embedding are looked up in place, never the table copied (llama.cpp never offloads
        # GET_ROWS; offloadsim's engine neither: sim.costs.memory.streamed_units gives it no slot); a peer's offload is
        # decided per operation, and its head sees one token per sequence (the last position's logits)
        kind = units[ui].kind
        small_head = kind == "lm_head" and w.batch < (plan.gpu_offload_min_tokens or 0)
        offload = offload and not (kind == "embedding" or peer is not None and small_head)
        return _unit_row(model, ui, t[units[ui].name], plan, machine, peer, pays_step, offload, tied)
    return row


def _unit_row(model: ModelShape, ui: int, p, plan: Plan, machine: MachineSpec, peer, pays_step: bool,
              offload: bool, tied_head: bool) -> tuple:
    """Step-invariant columns of a unit: (cpu, load, read, unpack, copy, copy_bytes, pinned_slot, blocking, overhead).
    A CPU-placed unit computed on the GPU for a large step (offload) is copied from where it lives. A copy from
    pageable memory does not overlap GPU compute (measured on the H200: the compute of the unit before it finished
    only after the copy; lab/journal/validation.md), so it waits for the previous compute like a blocking copy."""
    u = model.units[ui]
    ratio = plan.codec.ratio if plan.codec else 1.0
    cpu = p.compute == "cpu" and not offload
    load = GPU_LOAD if (not cpu and p.tier != "vram") else CPU_READ if (cpu and p.tier.startswith("disk")) else 0
    disk = bool(load) and p.tier.startswith("disk")
    # a CPU lookup in a mapped embedding touches the rows it reads, not the table (Accelerate's disk offload is a view)
    rows_only = u.kind == "embedding" and load == CPU_READ and peer is not None and peer.mmap_reads
    read = u.nbytes * (ratio if p.tier == "disk_compressed" else 1.0) if disk and not rows_only else 0.0
    unpack = unpack_time_s(u.nbytes, plan.codec) if load and p.tier.endswith("compressed") else 0.0
    pins = plan.engine != "airllm" or airllm_pins(u)  # AirLLM pins a module up to its limit only
    staged = plan.pinned_staging and p.tier in STAGED_TIERS and pins
    gpu_load = load == GPU_LOAD
    pinned = p.tier == "ram_pinned" or staged
    copy = copy_time_s(u.nbytes, machine, pinned=pinned) if gpu_load else 0.0
    blocking = gpu_load and (not plan.overlap_copy or not pinned)
    if peer is None:
        overhead = machine.engine.stream_overhead_s.get(p.tier, 0.0) if load else 0.0
    else:  # a peer: a pinned copy per load on the loader; hooks, cleanup and its generation loop on the compute lane
        unpack += u.nbytes / machine.host_memory.memcpy_bytes_per_s if gpu_load and peer.pin_each_load and pins \
            else 0.0
        mods = param_modules(u.kind, model.family)
        per_tensor = peer.disk_tensor_s + peer.disk_header_entry_s * model.tensors_per_shard if disk else 0.0
        units = airllm_modules(u, tied_head) if plan.engine == "airllm" else float(gpu_load)
        hooks = peer.load_module_s if gpu_load else peer.hook_module_s if disk else 0.0
        overhead = hooks * mods + peer.load_unit_s * units + per_tensor * mods \
            + (peer.step_s if ui == 0 and pays_step else 0.0) \
            + (airllm_loader_wait_s(u, machine, copy, 0.0, peer.load_unit_s)
               if plan.engine == "airllm" and gpu_load and not model.is_moe and pins else 0.0)
    return cpu, load, read, unpack, copy, float(u.nbytes) if gpu_load else 0.0, gpu_load and staged, blocking, overhead


def airllm_pins(u: UnitShape) -> bool:
    """Whether AirLLM pins this unit's load (its prefetching loader, up to AIRLLM_PIN_LIMIT_BYTES a module)."""
    return u.nbytes <= AIRLLM_PIN_LIMIT_BYTES


def airllm_modules(u: UnitShape, tied_head: bool) -> int:
    """The modules of a unit that AirLLM streams, each cleaned up after its forward (airllm 4.0: the embedding, every
    decoder layer, the final norm and the head; a head tied to the embedding is neither streamed nor is the
    embedding, which stays resident, but the norm still is). `tied_head`: the model's (ModelShape.tied_head)."""
    if u.kind == "embedding":
        return 0 if tied_head else 1
    if u.kind == "lm_head":  # our head unit holds the final norm too
        return 1 if tied_head else 2
    return 1


def airllm_loader_wait_s(u: UnitShape, machine: MachineSpec, copy_s: float, miss_share: float = 0.0,
                        cleanup_s: float | None = None, whole: bool = False) -> float:
    """AirLLM's pre-hook waiting for its loader thread, per streamed module of a dense model. The loader pins the next
    module's tensors one by one (`pin_memory()`, a copy at memcpy speed that releases the interpreter's lock), while
    the main thread copies this module to the GPU, runs it, then calls `gc.collect()`, which holds the lock for its
    0.2 s: the loader finishes the copy it is in and then stands still until the collection ends
    (lab/probes/gil_probe.py on the development machine: 0-1 of 8 copies of a thread completed during a collection;
    lab/journal/peers.md). So of the next module, what the loader copies while this one is copied to the GPU, and the one
    tensor in flight (taken as the largest: an MLP matrix, or the whole of a one-matrix embedding or head) within the
    collection (`cleanup_s`, the machine's measured `load_unit_s`: zero where it is not measured, so nothing hides
    behind it; None: taken as long enough), are ready when the hook asks; the rest is copied while the hook waits. A decoder's MLP matrix: its parameters less the attention's (hidden x (2 hidden + 2 KV width), the KV
    width from its 16-bit cache) over three.
    The loader's shards are memory-mapped: a `miss_share` of the module not in the page cache is read from disk by
    the pin copy's page faults, at the disk's cold speed on top of the copy's. A `whole` read is waited for entirely:
    the first module of a request (no collection before it to overlap; its pin copy is the loader lane's) and a
    module AirLLM does not pin (airllm_pins: the main thread's copy to the GPU faults it in).
    Warm, calls F-I, 8 runs of four shapes (peers_report.py --airllm-phases): the pre-hook, copy and wait, took
    7.6-7.7, 11.5-12.3, 38.8-40.0 and 33.8-35.4 ms a decoder, priced now at 7.9, 20.9, 42.6 and 41.0; the split
    differs (the copies ran slower than priced, the waits shorter than this wait: 3.8-23.0 ms against 5.7-30.7).
    Rules written after seeing those runs (the cold part after calls F-J's cold first tokens)."""
    if u.kind not in ("decoder", "embedding", "lm_head") or not u.params:
        return 0.0
    cold = machine.storage.cold_read_bytes_per_s
    if whole:
        return u.nbytes * miss_share / cold
    per_byte = 1.0 / machine.host_memory.memcpy_bytes_per_s + miss_share / cold
    largest = float(u.nbytes)
    if u.kind == "decoder":
        attention = u.hidden * (2 * u.hidden + 2 * u.kv_bytes_per_token // 4)
        largest = max(u.params - attention, 0) / 3 * (u.nbytes / u.params)
    in_flight = 0.0 if cleanup_s is None else max(0.0, largest * per_byte - cleanup_s)
    return max(0.0, (u.nbytes - largest) * per_byte - copy_s) + in_flight


GRAPH_WARMUP_STEPS = 2  # llama.cpp's CUDA backend: a graph whose shapes changed runs eagerly, then is captured


def graph_warmup_steps(w: Workload) -> list[int]:
    """The decode steps on which llama.cpp's CUDA backend warms a graph up (GRAPH_WARMUP_STEPS each): from the first
    after the prompt (its graph had other shapes) and from each step at which the cells of the KV cache the sequences
    share, rounded up to GGML_KV_PAD, grow (the attention's views change shape). A run that follows an identical one
    (llama-bench's repetitions) finds its graph captured: the caller leaves the cost out."""
    out: set[int] = set()
    cells = None
    for s in range(1, w.new_tokens):
        new, ctx = _step_shape(w, False, s)
        now = -(-w.batch * (ctx + new) // GGML_KV_PAD)
        if now != cells:
            out.update(range(s, min(s + GRAPH_WARMUP_STEPS, w.new_tokens)))
        cells = now
    return sorted(out)


def _step_shape(w: Workload, static_cache: bool, s: int) -> tuple[int, int]:
    """(new tokens, context) of step s. offloadsim's engine attends over its whole static cache (prompt + new tokens,
    masked) at every decode step, so one captured graph serves them all; the peers over what is written so far."""
    if s == 0:
        return w.prompt_tokens, 0
    return 1, w.prompt_tokens + (w.new_tokens - 1 if static_cache else s - 1)


def _moe_steps(sch: Schedule, rows: dict, row, compute_time, model: ModelShape, plan: Plan, w: Workload,
               shape_of) -> None:
    """The items of an MoE request: per step, each block's attention then the experts its router picked, a
    streamed expert's load gated by its router (or the previous block's, when the predictor guesses it)."""
    units, t = model.units, plan.tiers()
    router = ExpertRouter(model.n_routed_experts, model.experts_per_token, model.n_blocks, w.expert_skew, w.seed)
    rng = np.random.default_rng(w.seed + 1)
    order = [(ui, -1) if u.expert is None else (ui, u.block) for ui, u in enumerate(units)
             if u.expert is None or u.expert == 0]  # (unit, -1) or (first expert unit of a block, block)
    streamed_expert = [t[u.name].tier != "vram" or t[u.name].compute == "cpu" for u in units]
    cols = (sch.on_cpu, sch.load, sch.read_bytes, sch.unpack_s, sch.copy_s, sch.copy_bytes, sch.pinned_slot,
            sch.blocking, sch.overhead_s)

    def add(ui: int, s: int, r: tuple, comp: float, gate: int) -> None:
        sch.unit.append(ui)
        sch.step.append(s)
        for col, v in zip(cols, r):
            col.append(v)
        sch.compute_s.append(comp)
        sch.gate.append(gate)

    for s in range(w.new_tokens):
        new, ctx = shape_of(s)
        tokens = w.batch * new
        offload = bool(plan.gpu_offload_min_tokens and tokens >= plan.gpu_offload_min_tokens)
        if offload not in rows:
            rows[offload] = [row(i, offload) for i in range(len(units))]
        rs = rows[offload]
        router_item: dict[int, int] = {}
        for ui, block in order:
            if block < 0:
                if units[ui].kind in ATTENTION_KINDS:
                    router_item[units[ui].block] = len(sch.unit)
                add(ui, s, rs[ui], compute_time(ui, rs[ui][0], w.batch, new, ctx, s), -1)
                continue
            counts = router.draw(block, tokens)
            for n, e in enumerate(np.flatnonzero(counts).tolist()):
                ei = ui + e
                gate = -1
                if streamed_expert[ei]:
                    hit = plan.expert_predictor_hit_rate is not None and rng.random() < plan.expert_predictor_hit_rate
                    gate = router_item.get(block - 1, -1) if hit else router_item[block]
                add(ei, s, rs[ei], compute_time(ei, rs[ei][0], int(counts[e]), 1, 0, s, n == 0), gate)


_CACHES: "OrderedDict[tuple, tuple]" = OrderedDict()


def _compute_cache(model: ModelShape, machine: MachineSpec) -> dict:
    """Compute times depend on the model and the machine's GPU, CPU and grids only, so schedules for the same model
    on variants of a machine (other storage, link or budgets: whatif, the planner) share them. Keyed by the objects'
    identities; each entry holds those objects, so an identity cannot be reused while its entry lives."""
    key = (id(model), id(machine.gpu), id(machine.cpu), id(machine.compute_grids))
    hit = _CACHES.get(key)
    if hit is not None:
        _CACHES.move_to_end(key)
        return hit[-1]
    _CACHES[key] = (model, machine.gpu, machine.cpu, machine.compute_grids, {})
    if len(_CACHES) > 32:
        _CACHES.popitem(last=False)
    return _CACHES[key][-1]




def _dense_steps(sch: Schedule, rows: dict, row, compute_time, n_units: int, w: Workload, plan: Plan,
                 shape_of) -> None:
    """The columns of a dense model's request, a step (every unit, in order, no router gates) at a time."""
    cols: dict[str, list] = {name: [] for name in ROW_NAMES + ("compute_s",)}
    arrays: dict[bool, list[np.ndarray]] = {}
    for s in range(w.new_tokens):
        new, ctx = shape_of(s)
        offload = bool(plan.gpu_offload_min_tokens and w.batch * new >= plan.gpu_offload_min_tokens)
        if offload not in rows:
            rows[offload] = [row(i, offload) for i in range(n_units)]
        if offload not in arrays:
            arrays[offload] = [np.array(c) for c in zip(*rows[offload])]
        a = arrays[offload]
        comp = np.array([compute_time(ui, bool(a[0][ui]), w.batch, new, ctx, s) for ui in range(n_units)],
                        dtype=float)
        for name, col in zip(ROW_NAMES, a):
            cols[name].append(col)
        cols["compute_s"].append(comp)
    for name, parts in cols.items():
        setattr(sch, name, np.concatenate(parts).astype(COLUMNS[name]) if parts else np.zeros(0, COLUMNS[name]))
    sch.unit = np.tile(np.arange(n_units, dtype=np.int64), w.new_tokens)
    sch.step = np.repeat(np.arange(w.new_tokens, dtype=np.int64), n_units)
    sch.gate = np.full(n_units * w.new_tokens, -1, dtype=np.int64)
