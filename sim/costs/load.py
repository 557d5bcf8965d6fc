"""Placing the weights before the first token (the load phase), by eq. (1)'s stages.

Every unit a plan keeps in VRAM or RAM is read once from storage (cold, or from the page cache when warm) into
fresh memory, whose pages are faulted in at the host's first-touch speed; pinned tiers and the pinned staging buffers
are page-locked at the host's pinning speed instead; VRAM units are copied to the device from pageable memory.
Streamed tiers (disk) cost nothing here: they are read during the run. What each tier does is its row
(sim/costs/tiers.py).
"""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.costs.tiers import TIER_ROWS
from sim.costs.transfer import copy_time_s, pin_time_s, read_time_s
from sim.plan import Plan
from sim.model.shapes import ModelShape


def load_time_s(model: ModelShape, machine: MachineSpec, plan: Plan, warm: bool) -> dict[str, float]:
    """Seconds by stage ('read', 'pin', 'copy') and 'total_s'."""
    ratio = plan.codec.ratio if plan.codec else 1.0
    read = pin = copy = 0.0
    staged = 0
    touch = machine.host_memory.first_touch_bytes_per_s
    zstaged = 0.0
    for u, p in zip(model.units, plan.placements):
        row = TIER_ROWS[p.tier]
        if not row.reads_storage:  # kept in VRAM or RAM: read once now; pinned pages are touched when page-locked
            stored = row.stored(u.nbytes, ratio)
            read += read_time_s(stored, machine, warm) + (stored / touch if not row.pinned_home else 0.0)
        elif row.packed_reads:
            zstaged = max(zstaged, u.nbytes * ratio)
        if row.pinned_home:
            pin += pin_time_s(u.nbytes, machine)
        if row.resident:
            copy += copy_time_s(u.nbytes, machine, pinned=False)
        if row.staged:  # the engine keeps pinned staging buffers as large as the largest such unit
            staged = max(staged, u.nbytes)
    pin += pin_time_s(staged * max(plan.pinned_slots, 1), machine) if staged else 0.0
    read += zstaged * max(plan.pinned_slots, 1) / touch  # the engine's reused buffers for compressed reads
    return {"read_s": read, "pin_s": pin, "copy_s": copy, "total_s": read + pin + copy}
