"""Machines with several GPUs: choosing N of them, each GPU's link speed when they stream together, and the copy of
activations from one GPU to the next.

The sharing rule (a model, stated once): while a pipeline streams, every GPU's link is busy, so a shared uplink (a
PCIe switch's, a root port split x8/x8, a socket's) gives each GPU through it an equal share, and host memory, which
every link reads, caps their sum. A GPU's speed is the least of its own link, its shares, and its part of the host
memory's bandwidth.
"""
from __future__ import annotations

from hwmodels.specs import GpuAttach, LinkSpec, MachineSpec, Topology
from hwmodels.units import InputError


def with_gpus(machine: MachineSpec, n: int) -> MachineSpec:
    """The machine with its first `n` GPUs. A machine of one GPU gets `n` copies of it, each on a link of its own
    (no shared uplink, no peer-to-peer); n = 1 is the machine of GPU 0 alone, its JSON that of a one-GPU machine.
    Raises InputError for n < 1 or more GPUs than a multi-GPU preset has."""
    if n < 1:
        raise InputError(f"gpus: {n} is not a GPU count; give 1 or more.")
    have = machine.topology.gpus if machine.topology else (GpuAttach(gpu=machine.gpu, link=machine.link),)
    if machine.topology is not None and n > len(have):
        raise InputError(f"gpus: {n} is more than the {len(have)} GPUs of machine {machine.name!r}; give at most "
                         f"{len(have)} or another machine.")
    if n == machine.gpu_count:
        return machine
    name = f"{machine.name}@{n}gpu"
    if n == 1:
        return machine.model_copy(update={"topology": None, "name": name})
    if machine.topology is None:
        topo = Topology(gpus=have * n)
    else:
        gpus = have[:n]
        used = {s for a in gpus for s in a.shares}
        topo = machine.topology.model_copy(update={
            "gpus": gpus, "shared_bytes_per_s": {k: v for k, v in machine.topology.shared_bytes_per_s.items()
                                                 if k in used}})
    return machine.model_copy(update={"topology": topo, "name": name})


def attached(machine: MachineSpec) -> tuple[GpuAttach, ...]:
    """Every GPU with its link, GPU 0 first (one entry for a machine of one GPU)."""
    return machine.topology.gpus if machine.topology else (GpuAttach(gpu=machine.gpu, link=machine.link),)


def shared_rates(machine: MachineSpec, active: set[int] | None = None) -> list[tuple[float, float]]:
    """Each GPU's (pinned, pageable) host-to-device speed while the `active` GPUs (default: all) stream together
    (the module's sharing rule); a GPU not active gets its speed as if it streamed alone beside them."""
    gpus = attached(machine)
    if len(gpus) == 1:
        return [(machine.link.pinned_h2d_bytes_per_s, machine.link.pageable_h2d_bytes_per_s)]
    topo = machine.topology
    on = set(range(len(gpus))) if active is None else active
    users = {s: max(sum(s in a.shares for g, a in enumerate(gpus) if g in on), 1) for s in topo.shared_bytes_per_s}
    caps = [min([topo.shared_bytes_per_s[s] / users[s] for s in a.shares], default=float("inf")) for a in gpus]
    pinned = [min(a.link.pinned_h2d_bytes_per_s, c) for a, c in zip(gpus, caps)]
    pageable = [min(a.link.pageable_h2d_bytes_per_s, c) for a, c in zip(gpus, caps)]
    host = machine.host_memory.bandwidth_bytes_per_s
    busy = [g for g in range(len(gpus)) if g in on] or [0]
    fp = min(1.0, host / sum(pinned[g] for g in busy))
    fq = min(1.0, host / sum(pageable[g] for g in busy))
    return [(p * fp, q * fq) for p, q in zip(pinned, pageable)]


def shared_link(link: LinkSpec, pinned: float, pageable: float) -> LinkSpec:
    """`link` at the given speeds; measured speeds by size are scaled by the same factors."""
    if pinned == link.pinned_h2d_bytes_per_s and pageable == link.pageable_h2d_bytes_per_s:
        return link
    fp, fq = pinned / link.pinned_h2d_bytes_per_s, pageable / link.pageable_h2d_bytes_per_s
    points = tuple(p.model_copy(update={"pinned_bytes_per_s": p.pinned_bytes_per_s * fp,
                                        "pageable_bytes_per_s": p.pageable_bytes_per_s * fq}) for p in link.by_size)
    return link.model_copy(update={"pinned_h2d_bytes_per_s": pinned, "pageable_h2d_bytes_per_s": pageable,
                                   "by_size": points})


def handoff_s(machine: MachineSpec, src: int, dst: int, nbytes: float) -> float:
    """Seconds to copy `nbytes` of activations from GPU `src` to GPU `dst`: one peer-to-peer copy where the
    topology has it, else through pinned host memory (a device-to-host copy, then a host-to-device one, each at its
    link's pinned speed, the device-to-host taken as fast as the host-to-device)."""
    if src == dst:
        return 0.0
    topo = machine.topology
    if topo is not None and topo.p2p_bytes_per_s is not None:
        return topo.p2p_latency_s + nbytes / topo.p2p_bytes_per_s
    gpus = attached(machine)
    a, b = gpus[src % len(gpus)].link, gpus[dst % len(gpus)].link
    return a.latency_s + nbytes / a.pinned_h2d_bytes_per_s + b.latency_s + nbytes / b.pinned_h2d_bytes_per_s
