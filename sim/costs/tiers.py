"""The storage tiers, each described once: one frozen row per tier.

A row says where a unit stored in the tier lives between uses (VRAM, pinned RAM, pageable RAM or storage: the budget
its bytes count against), whether it is kept compressed (stored at the codec's ratio, unpacked before each copy),
whether its copy to the GPU passes through a pinned staging slot, and whether the CPU can compute it in place.
Everything else (what a use reads from storage, which host memory the copy reads, what the load phase does) follows
from those four facts, as the properties below. Eq. (1), the load phase, the memory accounting, the planner's
options and the engine read these rows instead of testing a tier's name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from hwmodels.specs import MachineSpec
from hwmodels.units import InputError
from sim.costs.transfer import Codec, copy_time_s, unpack_time_s

Tier = Literal["vram", "ram_pinned", "ram_pageable", "ram_compressed", "disk_raw", "disk_compressed"]
Home = Literal["vram", "pinned", "pageable", "storage"]


@dataclass(frozen=True)
class TierRow:
    """What storing a unit in one tier means (module docstring)."""
    name: str
    home: Home             # where the weights live between uses
    compressed: bool       # stored at the codec's ratio, unpacked before each copy to the GPU
    staged: bool           # its copy to the GPU reads a pinned staging slot (when the plan stages), not its home
    cpu_computable: bool   # the CPU can compute a unit stored here (it reads raw weights from host memory)

    @property
    def resident(self) -> bool:
        """Kept in VRAM: nothing is read, unpacked or copied at a use."""
        return self.home == "vram"

    @property
    def reads_storage(self) -> bool:
        """Each use reads the unit's stored bytes from storage (or the page cache)."""
        return self.home == "storage"

    @property
    def unpacks(self) -> bool:
        return self.compressed

    @property
    def in_ram(self) -> bool:
        """Its bytes are held in RAM (pinned or pageable), counted against the RAM budget, not left to the page cache."""
        return self.home in ("pinned", "pageable")

    @property
    def pinned_home(self) -> bool:
        """Held in pinned RAM: counted against the pinned budget, copied to the GPU at the pinned speed."""
        return self.home == "pinned"

    @property
    def packed_reads(self) -> bool:
        """Its reads land, still compressed, in reused host buffers of the stored size before they are unpacked."""
        return self.reads_storage and self.compressed

    @property
    def cpu_memory(self) -> str:
        """The host memory a CPU computing the unit reads: 'pinned' or 'pageable' (the compute grids' key)."""
        return "pinned" if self.pinned_home else "pageable"

    @property
    def copy_from(self) -> str | None:
        """What its copy to the GPU reads: None (resident), 'pinned', 'pageable', or 'staging' (a pinned slot when the
        plan stages, else a pageable buffer)."""
        if self.resident:
            return None
        return "pinned" if self.pinned_home else "staging" if self.staged else "pageable"

    def copies_pinned(self, staging: bool) -> bool:
        """Whether its copy to the GPU reads pinned memory, given whether the plan stages through pinned slots."""
        return self.pinned_home or (self.staged and staging)

    def stored(self, nbytes, ratio: float):
        """Bytes it keeps for `nbytes` of weights (a number or an array): `ratio` (the codec's) of them compressed."""
        return nbytes * ratio if self.compressed else nbytes


TIER_ROWS: dict[str, TierRow] = {r.name: r for r in (
    TierRow("vram", home="vram", compressed=False, staged=False, cpu_computable=False),
    TierRow("ram_pinned", home="pinned", compressed=False, staged=False, cpu_computable=True),
    TierRow("ram_pageable", home="pageable", compressed=False, staged=False, cpu_computable=True),
    TierRow("ram_compressed", home="pageable", compressed=True, staged=True, cpu_computable=False),
    TierRow("disk_raw", home="storage", compressed=False, staged=True, cpu_computable=True),
    TierRow("disk_compressed", home="storage", compressed=True, staged=True, cpu_computable=False),
)}
TIERS: tuple[str, ...] = tuple(TIER_ROWS)
STAGED_TIERS: tuple[str, ...] = tuple(t for t, r in TIER_ROWS.items() if r.staged)


def tier_row(tier: str) -> TierRow:
    """The row of `tier`; raises InputError naming the tier and the choices."""
    row = TIER_ROWS.get(tier)
    if row is None:
        raise InputError(f"tier: unknown tier {tier!r}; use one of {', '.join(TIERS)}.")
    return row


class LoadRow(NamedTuple):
    """One use of a unit by the schedule: whether it is copied to the GPU or read by the CPU, the stored bytes read
    from storage, the unpack and copy seconds, whether the copy reads pinned memory and whether through a slot."""
    gpu_load: bool
    cpu_read: bool
    read_nbytes: float
    unpack_s: float
    copy_s: float
    pinned: bool
    staged: bool


def load_row(row: TierRow, nbytes: int, on_cpu: bool, codec: Codec | None, machine: MachineSpec,
             staging: bool) -> LoadRow:
    """A use of a unit of `nbytes` stored in `row`'s tier, computed on the CPU (`on_cpu`) or the GPU. `staging`: the
    plan stages host copies through pinned slots (and the engine pins this unit). A GPU use of a non-resident unit
    loads it (read if stored, unpacked if compressed, copied); a CPU use reads it from storage where it is stored."""
    gpu_load = not on_cpu and not row.resident
    cpu_read = on_cpu and row.reads_storage
    load = gpu_load or cpu_read
    read = nbytes * (codec.ratio if codec and row.compressed else 1.0) if load and row.reads_storage else 0.0
    unpack = unpack_time_s(nbytes, codec) if load and row.unpacks else 0.0
    staged = staging and row.staged
    pinned = row.copies_pinned(staging)
    copy = copy_time_s(nbytes, machine, pinned=pinned) if gpu_load else 0.0
    return LoadRow(gpu_load, cpu_read, read, unpack, copy, pinned, staged)


def tier_column(fact: str) -> np.ndarray:
    """One fact of every row, in TIERS order, as an array: indexed by tier codes, it gives each unit's."""
    return np.array([getattr(r, fact) for r in TIER_ROWS.values()])
