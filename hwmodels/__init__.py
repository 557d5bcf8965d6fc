"""Hardware models: frozen specs of storage, host memory, links, GPUs, CPUs and machines, with cited presets."""
from hwmodels.specs import CpuSpec, GpuSpec, HostMemorySpec, LinkSpec, MachineSpec, StorageSpec
from hwmodels.presets import get_machine, list_machines, machine_sources, gpu_presets, link_presets
from hwmodels.units import InputError, parse_bandwidth, parse_bytes, parse_link

__all__ = [
    "CpuSpec", "GpuSpec", "HostMemorySpec", "LinkSpec", "MachineSpec", "StorageSpec",
    "get_machine", "list_machines", "machine_sources", "gpu_presets", "link_presets",
    "InputError", "parse_bandwidth", "parse_bytes", "parse_link",
]
