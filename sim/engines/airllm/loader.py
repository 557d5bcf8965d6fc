"""AirLLM 4.0's loader: which modules it streams and pins, how long its hooks wait for the loader thread, and the
waits of reads that miss the page cache."""
from __future__ import annotations

import numpy as np

from hwmodels.specs import MachineSpec
from sim.model.shapes import ModelShape, UnitShape
from sim.run.items import GPU_LOAD, Schedule
from sim.run.reads import cache_found

# airllm 4.0 `max_pinned_layer_bytes`: a module's load is pinned only up to this size; a larger one stays the mapped
# file's pages, copied to the GPU from there
AIRLLM_PIN_LIMIT_BYTES = 2 * 2**30


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
    Warm, lab/data/peers/peers-{f..i}.json, 8 runs of four shapes (peers_report.py --airllm-phases): the pre-hook, copy
    and wait, took 7.6-7.7, 11.5-12.3, 38.8-40.0 and 33.8-35.4 ms a decoder, priced now at 7.9, 20.9, 42.6 and 41.0; the
    split differs (the copies ran slower than priced, the waits shorter than this wait: 3.8-23.0 ms against 5.7-30.7).
    Rules written after seeing those runs (the cold part after the cold first tokens of peers-{f..j}.json)."""
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
