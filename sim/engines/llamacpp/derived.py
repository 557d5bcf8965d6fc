"""llama.cpp's costs on a machine they were not fitted on: the fitted part of the reference machine's table
(sim.engines.reference) carried over, the rest derived from the machine's parts.

Fitted (h200-testbox, 16 cores of one socket): its CPU kernels stream 92.37 GB/s, 5.77 GB/s a core, above the 40-60
GB/s its presets estimate for the host's memory: the 16 cores bound the speed, not the memory. Derived:
- a core's speed: the fitted one times this CPU's FLOP rate a core over the reference's (clock x vector width:
  the dequantising dot products bound a core);
- streaming: the lesser of a core's speed times the cores (llama.cpp's default -t is the physical cores) and the
  matrix-vector bandwidth of one NUMA node (cpu.memory_bytes_per_s / cpu.numa_nodes): llama.cpp's default is no
  NUMA strategy (ggml-cpu's GGML_NUMA_STRATEGY_DISABLED, --numa off), its weights mapped where the page cache put
  them, so the threads of every socket read one node's memory; the cache and head speeds keep their fitted ratio to
  it, its CPU costs per operator and row go as its inverse (LlamacppCosts.scaled);
- its CPU multiply rate: the fitted rate times the cores and a core's speed over the reference's;
- its GPU costs per weight row (a memory round trip each): times the reference GPU's bandwidth over this GPU's;
- the rest (its loop per token, kernel launches, scheduler splits, graph warm-up) as fitted.
"""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.engines.base import validate_costs
from sim.engines.llamacpp.costs import LlamacppCosts
from sim.engines.reference import own_or_reference, reference_machine

GPU_ROW_COSTS = ("gpu_row_s", "gpu_multi_row_s", "gpu_row_token_s")  # per weight row: one memory round trip each


def usable_bytes_per_s(machine: MachineSpec) -> float:
    """The bandwidth llama.cpp's CPU kernels can draw on: one NUMA node's share of the matrix-vector bandwidth."""
    return machine.cpu.memory_bytes_per_s / machine.cpu.numa_nodes


def core_scale(machine: MachineSpec, ref_machine: MachineSpec) -> float:
    """All of `machine`'s cores against all of the reference's, each at its FLOP rate (clock x vector width)."""
    return machine.cpu.flops_per_s / ref_machine.cpu.flops_per_s


def cpu_stream_bytes_per_s(machine: MachineSpec, ref_bytes_per_s: float, ref_machine: MachineSpec) -> float:
    """The fitted streaming rate carried by the cores' speed, bounded by the bandwidth llama.cpp can use."""
    return min(ref_bytes_per_s * core_scale(machine, ref_machine), usable_bytes_per_s(machine))


def derive(ref: LlamacppCosts, ref_machine: MachineSpec, machine: MachineSpec) -> LlamacppCosts:
    """The reference costs `ref` (fitted on `ref_machine`) carried to `machine`."""
    out = ref
    if ref.cpu_bytes_per_s is not None:
        stream = cpu_stream_bytes_per_s(machine, ref.cpu_bytes_per_s, ref_machine)
        out = ref.scaled(stream / ref.cpu_bytes_per_s)
    update = {}
    if ref.cpu_flops_per_s is not None:
        update["cpu_flops_per_s"] = ref.cpu_flops_per_s * core_scale(machine, ref_machine)
    gpu = ref_machine.gpu.vram_bytes_per_s / machine.gpu.vram_bytes_per_s
    update.update({p: getattr(ref, p) * gpu for p in GPU_ROW_COSTS if getattr(ref, p) is not None})
    return out.model_copy(update=update)


def costs_for(machine: MachineSpec) -> LlamacppCosts:
    """llama.cpp's costs on `machine`: its own fitted table where it has one, else derived from the reference's."""
    raw, own = own_or_reference(machine, "llamacpp")
    costs = validate_costs("llamacpp", LlamacppCosts, raw)
    return costs if own else derive(costs, reference_machine(), machine)
