"""Machine flags (--gpu, --ram, --storage, --link, --cpu, --gpus): a machine composed from component presets.

With `--machine M` the flags replace parts of M; without it they replace parts of a base chosen by the GPU
(a laptop GPU: rtx3080-laptop; another consumer GPU: desktop-4090; a datacenter GPU: xeon-4090). Each value keeps
its source: a preset's citation, "user" for a size or speed typed on the command line, "[C] ..." for a scaled link.
Parts are swapped by planner.whatif.variant, the rule `whatif --vary` uses (a link of N lanes scales the x16 preset).
`--gpus N` takes N of the machine's GPUs (hwmodels.topology.with_gpus: a one-GPU machine gets N copies of its GPU).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from hwmodels.presets import get_part, load_machine, machine_sources, part_names
from hwmodels.specs import MachineSpec
from hwmodels.topology import with_gpus
from hwmodels.units import InputError, check_size, parse_bandwidth, parse_bytes, parse_link

PARTS = ("gpu", "storage", "link", "cpu")
# values of the GPU given by flags, on top of its preset: flag dest -> (GpuSpec field, parser)
GPU_VALUES = {"gpu_vram": ("vram_bytes", parse_bytes), "gpu_bandwidth": ("vram_bytes_per_s", parse_bandwidth),
              "gpu_name": ("name", None)}
DEFAULT_MACHINE = "rtx3080-laptop"


def base_for_gpu(gpu: str | None) -> str:
    """The machine preset whose host (CPU, RAM, disk) suits a GPU preset."""
    if gpu is None:
        return DEFAULT_MACHINE
    spec = get_part("gpu", gpu)[0]
    if "laptop" in gpu:
        return "rtx3080-laptop"
    return "desktop-4090" if spec.market == "consumer" else "xeon-4090"


def _storage_speed(value: str) -> float | None:
    """A bandwidth such as '3.5GB/s' given to --storage, or None when the value is a preset name."""
    if value in part_names("storage"):
        return None
    if not any(ch.isdigit() for ch in value):
        raise InputError(f"storage: unknown preset {value!r}; give one of {', '.join(part_names('storage'))} "
                         "or a read speed such as 3.5GB/s.")
    return parse_bandwidth(value, "storage")


def gpu_count(value: str) -> int:
    """The value of --gpus (1 to 16); raises InputError naming it."""
    if not value.strip().isdigit() or not 1 <= int(value) <= 16:
        raise InputError(f"gpus: {value!r} is not a GPU count; give a whole number from 1 to 16.")
    return int(value)


def check_part(kind: str, value: str) -> None:
    """Refuse a bad flag value in one sentence while the arguments are parsed."""
    if kind == "gpus":
        gpu_count(value)
    elif kind == "link":
        gen, _ = parse_link(value, "link")
        get_part("link", f"pcie{gen}x16")
    elif kind == "storage":
        _storage_speed(value)
    elif kind == "ram":
        check_size(parse_bytes(value, "ram"), "ram", value)
    elif kind in GPU_VALUES:
        field, parse = GPU_VALUES[kind]
        if kind == "gpu_vram":
            check_size(parse(value, "gpu-vram"), "gpu-vram", value)
        elif parse is not None:
            parse(value, kind.replace("_", "-"))
    else:
        get_part(kind, value)


def compose(base: str | MachineSpec, parts: dict[str, str], ram: str | None = None,
            base_named: bool = True) -> MachineSpec:
    """`base` with the given parts swapped in; the sources say where every value came from."""
    from planner.whatif import variant

    machine = load_machine(base) if isinstance(base, str) else base
    sources = dict(machine.sources) or (machine_sources(base) if isinstance(base, str) else {})
    combo: dict[str, str] = {}
    for kind in ("gpu", "cpu"):
        if kind in parts:
            combo[kind] = parts[kind]
    speed = _storage_speed(parts["storage"]) if "storage" in parts else None
    if "storage" in parts and speed is None:
        combo["storage"] = parts["storage"]
    link = parts.get("link")
    if link is None and "gpu" in parts:  # a swapped GPU runs at its own generation, x16 unless the preset says fewer
        gpu = get_part("gpu", parts["gpu"])[0]
        link = f"pcie{gpu.pcie_generation}x{getattr(gpu, 'pcie_lanes', None) or 16}"
    if link is not None:
        combo["link"] = link
    if ram is not None:
        combo["ram"] = ram
    m, _ = variant(machine, combo)
    for kind in ("gpu", "cpu", "storage"):
        if kind in combo:
            sources = {k: v for k, v in sources.items() if not k.startswith(kind + ".")}
            sources.update(get_part(kind, combo[kind])[1])
    if "link" in combo:
        gen, lanes = parse_link(combo["link"])
        sources = {k: v for k, v in sources.items() if not k.startswith("link.")}
        sources.update(get_part("link", f"pcie{gen}x16")[1])
        how = "from --link" if "link" in parts else f"the GPU's PCIe {gen}.0 (no --link given)"
        if lanes != 16:
            for f in ("lanes", "pinned_h2d_bytes_per_s", "pageable_h2d_bytes_per_s"):
                sources[f"link.{f}"] = (f"[C] pcie{gen}x16 preset scaled by {lanes}/16 lanes, {how} "
                                        "(planner.whatif.variant)")
        sources["link.name"] = f"{combo['link']}: {how}"
    if speed is not None:
        m = m.model_copy(update={"storage": m.storage.model_copy(update={
            "name": f"storage read at {parts['storage']}", "cold_read_bytes_per_s": speed})})
        sources["storage.cold_read_bytes_per_s"] = "user"
    if ram is not None:
        sources["host_memory.capacity_bytes"] = "user"
    given = ", ".join(f"{k}={v}" for k, v in {**parts, **({"ram": ram} if ram else {})}.items())
    base_name = machine.name
    sources["machine.base"] = f"{base_name}" + (" (--machine)" if base_named else " (base chosen for the GPU)")
    return MachineSpec.model_validate({**m.model_dump(), "name": f"{base_name}+{'+'.join(parts.values()) or 'ram'}",
                                       "description": f"{base_name} with {given}", "sources": sources})


def with_gpu_values(machine: MachineSpec, values: dict[str, str]) -> MachineSpec:
    """`machine` with the GPU's size, bandwidth or name given by flags (--gpu-vram, --gpu-bandwidth, --gpu-name),
    each value's source 'user'."""
    if not values:
        return machine
    gpu, sources = machine.gpu.model_dump(), dict(machine.sources)
    for dest, value in values.items():
        field, parse = GPU_VALUES[dest]
        gpu[field] = parse(value, dest.replace("_", "-")) if parse else value
        sources[f"gpu.{field}"] = "user"
    if "gpu_name" not in values:
        gpu["name"] = f"{gpu['name']} (" + ", ".join(f"{d[4:]} {v}" for d, v in values.items()) + ")"
        sources["gpu.name"] = "user: the preset named with the values given"
    return MachineSpec.model_validate({**machine.model_dump(), "gpu": gpu, "sources": sources})


@dataclass(frozen=True)
class MachineRequest:
    """A machine named by flags: resolved by hwmodels.presets.load_machine (via `resolve`) when a command needs it."""
    base: str | None = None
    parts: dict[str, str] = field(default_factory=dict)
    ram: str | None = None
    gpu_values: dict[str, str] = field(default_factory=dict)
    gpus: int | None = None

    def resolve(self) -> MachineSpec:
        base = self.base or base_for_gpu(self.parts.get("gpu"))
        if self.parts or self.ram is not None or self.gpu_values:
            machine = with_gpu_values(compose(base, self.parts, self.ram, base_named=self.base is not None),
                                      self.gpu_values)
        else:
            machine = load_machine(base)
        return with_gpus(machine, self.gpus) if self.gpus else machine

    def __fspath__(self) -> str:  # outputs.check_output compares outputs with input paths
        return self.base or DEFAULT_MACHINE

    def __str__(self) -> str:
        return self.__fspath__()


def _settle(ns: argparse.Namespace) -> None:
    """Recompute args.machine from every machine flag given so far (--ram is the installed RAM, a part)."""
    flags = ns.machine_flags
    parts = {k: flags[k] for k in PARTS if k in flags}
    gpu_values = {k: flags[k] for k in GPU_VALUES if k in flags}
    gpus = gpu_count(flags["gpus"]) if "gpus" in flags else None
    if parts or gpu_values or "ram" in flags or gpus:
        ns.machine = MachineRequest(base=flags.get("machine"), parts=parts, ram=flags.get("ram"),
                                    gpu_values=gpu_values, gpus=gpus)
    elif "machine" in flags:
        ns.machine = flags["machine"]


class MachineFlag(argparse.Action):
    """Stores one machine flag and settles args.machine; bad values are refused in one sentence."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, "machine_flags", None) is None:
            namespace.machine_flags = {}
        if self.dest != "machine":
            try:
                check_part(self.dest, values)
            except InputError as exc:
                parser.error(str(exc).rstrip("."))
        namespace.machine_flags = {**namespace.machine_flags, self.dest: values}
        _settle(namespace)


def add_machine_flags(p: argparse.ArgumentParser, required: bool = False, default: str = DEFAULT_MACHINE) -> None:
    p.add_argument("--machine", action=MachineFlag, default=None if required else default, required=required,
                   help=f"machine preset name or calibrated profile JSON (default {default}); the flags below "
                   "replace its parts")
    p.add_argument("--gpu", action=MachineFlag, default=None, help="GPU preset, e.g. rtx4070 (offloadsim hw parts)")
    p.add_argument("--storage", action=MachineFlag, default=None,
                   help="storage preset (sata, nvme-gen3/4/5, ...) or a cold read speed such as 3.5GB/s")
    p.add_argument("--link", action=MachineFlag, default=None, help="host-to-GPU link, e.g. pcie4x16 or pcie4x8")
    p.add_argument("--cpu", action=MachineFlag, default=None, help="CPU preset, e.g. desktop-8core")
    p.add_argument("--ram", action=MachineFlag, default=None, help="installed RAM of the machine, e.g. 64GiB (the "
                   "budget is --ram-budget)")
    p.add_argument("--gpu-vram", action=MachineFlag, default=None, help="the GPU's VRAM size, e.g. 16GiB")
    p.add_argument("--gpu-bandwidth", action=MachineFlag, default=None, help="the GPU's VRAM bandwidth, e.g. 288GB/s")
    p.add_argument("--gpu-name", action=MachineFlag, default=None, help="the GPU's name as reports show it")
    p.add_argument("--gpus", action=MachineFlag, default=None, help="use N of the machine's GPUs (a machine of one "
                   "GPU: N copies of it, each on its own link); --vram is then each GPU's budget")
    p.set_defaults(machine_flags=None)


