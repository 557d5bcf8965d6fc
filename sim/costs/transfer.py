"""Moving bytes: a storage read, unpacking, a host-to-device copy, pinning, and a layer's KV cache between RAM and the
GPU; the codec of the compressed tiers. Pure functions of a machine spec, SI units."""
from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat

from hwmodels.specs import MachineSpec
from hwmodels.units import InputError

CHUNK_BYTES = 4 * 2**20  # the layer store compresses byte planes in chunks of this size (validate/store.py)


class Codec(BaseModel):
    """A lossless codec: stored/raw size ratio and total decode speed (decoded bytes per second)."""
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(default="zstd", description="Codec name.")
    ratio: float = Field(default=0.70, gt=0, le=1.0,
                         description="Stored bytes over raw bytes; 0.69-0.71 for byte-plane zstd on BF16 (peer-engines.md).")
    unpack_bytes_per_s: PositiveFloat = Field(description="Decode speed of all unpack threads together.")
    threads: int = Field(default=1, ge=1, description="Unpack threads (the speed above is theirs together).")
    chunk_bytes: int = Field(default=0, ge=0, description="Independently compressed chunk size (each decoded by one "
                             "thread); 0: decoding splits perfectly across the threads.")


def machine_codec(machine: MachineSpec, name: str = "zstd", ratio: float = 0.70, threads: int | None = None) -> Codec:
    """The machine's codec: per-thread speed from its CPU preset times the unpack threads."""
    per_thread = machine.cpu.unpack_bytes_per_s_per_thread.get(name)
    if per_thread is None:
        raise InputError(f"codec: machine {machine.name!r} has no unpack speed for {name!r}; "
                         f"use one of {', '.join(machine.cpu.unpack_bytes_per_s_per_thread)} or give --unpack-speed.")
    n = threads or machine.cpu.unpack_threads
    return Codec(name=name, ratio=ratio, unpack_bytes_per_s=per_thread * n, threads=n, chunk_bytes=CHUNK_BYTES)


def unpack_time_s(nbytes: float, codec: Codec) -> float:
    """Decoding `nbytes`: chunks go to the threads in rounds, each round as long as one chunk on one thread
    (a unit of 30 chunks on 8 threads takes 4 rounds, not 3.75); without chunks, bytes over the total speed."""
    if not codec.chunk_bytes or nbytes <= 0:
        return nbytes / codec.unpack_bytes_per_s
    chunks = math.ceil(nbytes / codec.chunk_bytes)
    rounds = math.ceil(chunks / codec.threads)
    return rounds * min(codec.chunk_bytes, nbytes) * codec.threads / codec.unpack_bytes_per_s


def read_time_s(stored_nbytes: float, machine: MachineSpec, warm: bool) -> float:
    """One request from storage: latency plus bytes over the cold or page-cache speed."""
    st = machine.storage
    return st.request_latency_s + stored_nbytes / (st.cache_read_bytes_per_s if warm else st.cold_read_bytes_per_s)


def copy_bytes_per_s(nbytes: float, machine: MachineSpec, pinned: bool = True) -> float:
    """Host-to-device speed for one copy of `nbytes`: measured by size where calibrate gave a table (linear in log
    size between points, the end values outside), else the link's single pinned or pageable speed."""
    link = machine.link
    if not link.by_size:
        return link.pinned_h2d_bytes_per_s if pinned else link.pageable_h2d_bytes_per_s
    pts = sorted(link.by_size, key=lambda p: p.nbytes)
    speeds = [p.pinned_bytes_per_s if pinned else p.pageable_bytes_per_s for p in pts]
    return float(np.interp(np.log(max(nbytes, 1.0)), [np.log(p.nbytes) for p in pts], speeds))


def copy_time_s(nbytes: float, machine: MachineSpec, pinned: bool = True) -> float:
    """One host-to-device copy from pinned or pageable memory."""
    return machine.link.latency_s + nbytes / copy_bytes_per_s(nbytes, machine, pinned)


def kv_move_s(nbytes: float, machine: MachineSpec) -> float:
    """Moving `nbytes` of one layer's K and V between its cache in RAM and a copy on the GPU, as offloadsim's engine
    does around a CPU-held layer it multiplies on the GPU (validate/stream_run.py, move_kv): K, then V, each a host
    copy between the cache and a pinned buffer and a pinned copy over the link. The link at its pinned speed both
    ways (55.3 GB/s device to host against 55.5 host to device on the H200 machine, shared/reference/h200-probe.json);
    the host copy, which torch spreads over its threads, at half the CPU's memory bandwidth (it reads and writes each
    byte). Measured on the H200 (lab/journal/validation.md): a prompt's 67 and 201 MB came back in 3.5-4.1 and
    9.7-11.5 ms, 15-30% under this price."""
    if nbytes <= 0:
        return 0.0
    half = nbytes / 2
    return 2 * (copy_time_s(half, machine) + kv_host_copy_s(half, machine))


def kv_host_copy_s(nbytes: float, machine: MachineSpec) -> float:
    """A host copy of `nbytes` of cache between RAM and the pinned buffer (kv_move_s)."""
    return nbytes / (machine.cpu.memory_bytes_per_s / 2)


def pin_time_s(nbytes: float, machine: MachineSpec) -> float:
    """Allocating (page-locking) `nbytes` of pinned host memory."""
    return nbytes / machine.host_memory.pin_bytes_per_s
