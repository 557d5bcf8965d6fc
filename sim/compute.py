"""Compute time of a unit on the GPU or the CPU for one workload step (roofline plus launch overheads)."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.equations import roofline_s
from sim.shapes import UnitShape


def gpu_compute_s(unit: UnitShape, machine: MachineSpec, batch: int, new_tokens: int, context: int) -> float:
    g = machine.gpu
    return roofline_s(unit.flops(batch, new_tokens, context), unit.bytes_touched(batch, new_tokens, context),
                      g.bf16_flops_per_s, g.vram_bytes_per_s, unit.launches * g.kernel_overhead_s)


def cpu_compute_s(unit: UnitShape, machine: MachineSpec, batch: int, new_tokens: int, context: int) -> float:
    c = machine.cpu
    return roofline_s(unit.flops(batch, new_tokens, context), unit.bytes_touched(batch, new_tokens, context),
                      c.flops_per_s, c.memory_bytes_per_s, unit.launches * c.op_overhead_s)
