"""The two equations of DESIGN.md and the roofline compute time, as pure functions. SI units.

(1) t_prep = S_disk / b_disk + t_unpack + S / b_pcie   (plus fixed per-request latencies, zero on toy hardware)
(2) compression pays when (S - S_disk) / b_disk > t_unpack

Which of eq. (1)'s stages a tier has is its row in sim/costs/tiers.py. The names of sim/costs/transfer.py and
sim/costs/tiers.py that callers import from here stay importable from here.
"""
from __future__ import annotations

from typing import NamedTuple

from hwmodels.specs import MachineSpec
from hwmodels.units import InputError
from sim.costs.tiers import STAGED_TIERS, TIERS, Tier, tier_row
from sim.costs.transfer import (CHUNK_BYTES, Codec, copy_bytes_per_s, copy_time_s, kv_host_copy_s, kv_move_s,
                                machine_codec, pin_time_s, read_time_s, unpack_time_s)

__all__ = ["PrepTime", "t_prep", "compression_pays", "roofline_s",
           # importable from here for the modules that import them from here
           "STAGED_TIERS", "TIERS", "Tier", "CHUNK_BYTES", "Codec", "copy_bytes_per_s", "copy_time_s",
           "kv_host_copy_s", "kv_move_s", "machine_codec", "pin_time_s", "read_time_s", "unpack_time_s"]


class PrepTime(NamedTuple):
    read_s: float
    unpack_s: float
    copy_s: float

    @property
    def total_s(self) -> float:
        return self.read_s + self.unpack_s + self.copy_s


def t_prep(nbytes: float, tier: str, machine: MachineSpec, *, warm: bool = False, codec: Codec | None = None,
           pinned: bool = True) -> PrepTime:
    """Eq. (1): time until a weight of `nbytes` (unpacked) stored in `tier` is ready in VRAM, by stage.

    warm: disk reads hit the page cache. pinned: host buffers are pinned (else pageable copy speed; a tier whose
    copy reads pageable memory copies at that speed either way).
    Raises InputError for an unknown tier or a compressed tier without a codec.
    """
    row = tier_row(tier)
    if row.resident:
        return PrepTime(0.0, 0.0, 0.0)
    if row.compressed and codec is None:
        raise InputError(f"codec: tier {tier!r} needs a codec; give --codec-ratio and --unpack-speed.")
    stored = row.stored(nbytes, codec.ratio if codec else 1.0)
    read = read_time_s(stored, machine, warm) if row.reads_storage else 0.0
    unpack = unpack_time_s(nbytes, codec) if row.unpacks else 0.0
    copy = copy_time_s(nbytes, machine, pinned=pinned and row.copy_from != "pageable")
    return PrepTime(read, unpack, copy)


def compression_pays(nbytes: float, stored_nbytes: float, read_bytes_per_s: float, unpack_s: float) -> bool:
    """Eq. (2): compression shortens the time to a ready weight iff the read time saved exceeds the unpack time."""
    return (nbytes - stored_nbytes) / read_bytes_per_s > unpack_s


def roofline_s(flops: float, nbytes: float, flops_per_s: float, bytes_per_s: float, overhead_s: float = 0.0) -> float:
    """Compute time: the larger of FLOPs over peak and bytes over bandwidth, plus a fixed overhead."""
    return max(flops / flops_per_s, nbytes / bytes_per_s) + overhead_s
