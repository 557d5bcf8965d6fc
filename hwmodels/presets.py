"""Load hardware presets from the TOML data files; every numeric value carries a source.

A leaf is `{ value = ..., source = "..." }`; strings such as "4GiB" or "2.3GB/s" are parsed here, by the field's
unit suffix. Machines name their parts by preset and may `set` dotted fields with their own sources.
"""
from __future__ import annotations

import functools
import tomllib
from importlib import resources
from typing import Any

from hwmodels.specs import CpuSpec, GpuSpec, HostMemorySpec, LinkSpec, MachineSpec, StorageSpec
from hwmodels.units import InputError, parse_bandwidth, parse_bytes, parse_seconds, unknown_name
from hwmodels.files import load_json
from hwmodels.ranges import PHYSICAL_RANGES, check_numbers, out_of_range

_PARTS = {"gpu": ("gpus.toml", GpuSpec), "link": ("links.toml", LinkSpec), "storage": ("storage.toml", StorageSpec),
          "host_memory": ("memory.toml", HostMemorySpec), "cpu": ("cpus.toml", CpuSpec)}


def _convert(field: str, value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _convert(field, v) for k, v in value.items()}
    if not isinstance(value, str):
        return value
    if field.endswith("_bytes_per_s") or field.endswith("_bytes_per_s_per_thread"):
        return parse_bandwidth(value, field)
    if field.endswith("_bytes"):
        return parse_bytes(value, field)
    if field.endswith("_s"):
        return parse_seconds(value, field)
    return value


def _leaf(field: str, raw: Any) -> tuple[Any, str | None]:
    if isinstance(raw, dict) and "value" in raw:
        return _convert(field, raw["value"]), raw.get("source")
    return raw, None


@functools.cache
def _table(filename: str) -> dict[str, Any]:
    with resources.files("hwmodels.data").joinpath(filename).open("rb") as fh:
        return tomllib.load(fh)


@functools.cache
def _part(kind: str, name: str) -> tuple[Any, dict[str, str]]:
    filename, cls = _PARTS[kind]
    table = _table(filename)
    names = [k for k in table if not k.startswith("_")]
    if name not in names:
        raise unknown_name(f"{kind} preset", name, names)
    merged = {**table.get("_defaults", {}), **table[name]}
    values, sources = {}, {}
    for field, raw in merged.items():
        values[field], src = _leaf(field, raw)
        if src:
            sources[f"{kind}.{field}"] = src
    if kind == "link":
        values.setdefault("name", name)
    return cls(**values), sources


def gpu_presets() -> dict[str, GpuSpec]:
    return {n: _part("gpu", n)[0] for n in _table("gpus.toml") if not n.startswith("_")}


def link_presets() -> dict[str, LinkSpec]:
    return {n: _part("link", n)[0] for n in _table("links.toml") if not n.startswith("_")}


def part_names(kind: str) -> list[str]:
    return [n for n in _table(_PARTS[kind][0]) if not n.startswith("_")]


def get_part(kind: str, name: str):
    """A single part preset (e.g. get_part('storage', 'nvme-gen5'))."""
    return _part(kind, name)


def list_machines() -> list[str]:
    return list(_table("machines.toml"))


@functools.cache
def _machine(name: str) -> tuple[MachineSpec, dict[str, str]]:
    table = _table("machines.toml")
    if name not in table:
        raise unknown_name("machine", name, list(table))
    entry = table[name]
    data: dict[str, Any] = {"name": name, "description": entry.get("description", "")}
    sources: dict[str, str] = {}
    if "base" in entry:  # every value of another preset, then this one's own
        base, base_sources = _machine(entry["base"])
        data.update({k: v for k, v in base.model_dump().items() if k not in ("name", "description", "sources")})
        sources.update(base_sources)
    for kind in _PARTS:
        if kind in entry or "base" not in entry:
            spec, src = _part(kind, entry[kind])
            data[kind] = spec.model_dump()
            sources.update(src)
    for path, raw in entry.get("set", {}).items():
        kind, field = path.split(".", 1)
        value, src = _leaf(field, raw)
        data[kind][field] = value
        if src:
            sources[path] = src
    # measured costs of engines on this machine (lab/journal/peers.md), each value with its source; the engine's
    # package checks them (sim.engines.costs_of)
    data.setdefault("peers", {})
    for engine, values in entry.get("peers", {}).items():
        data["peers"][engine] = {}
        for field, raw in values.items():
            data["peers"][engine][field], src = _leaf(field, raw)
            if src:
                sources[f"peers.{engine}.{field}"] = src
    if "topology" in entry:
        data["topology"] = _topology(entry["topology"], data, sources)
    data["sources"] = sources
    return MachineSpec.model_validate(data), sources


def _topology(entry: dict[str, Any], data: dict[str, Any], sources: dict[str, str]) -> dict[str, Any]:
    """A multi-GPU machine's topology from its preset: `count` copies of the machine's GPU and link, the shared
    uplinks each GPU's link runs through (`shares`, one list per GPU), their bandwidths (`shared`) and the
    peer-to-peer copy speed (`p2p_bytes_per_s`; absent: copies go through host memory)."""
    count, src = _leaf("count", entry["count"])
    sources["topology.count"] = src or ""
    shares, src = _leaf("shares", entry.get("shares", [[]] * count))
    if src:
        sources["topology.shares"] = src
    shared = {}
    for key, raw in entry.get("shared", {}).items():
        shared[key], src = _leaf("shared_bytes_per_s", raw)
        if src:
            sources[f"topology.shared.{key}"] = src
    out = {"gpus": [{"gpu": data["gpu"], "link": data["link"], "shares": list(shares[i])} for i in range(count)],
           "shared_bytes_per_s": shared}
    if "p2p_bytes_per_s" in entry:
        out["p2p_bytes_per_s"], src = _leaf("p2p_bytes_per_s", entry["p2p_bytes_per_s"])
        sources["topology.p2p_bytes_per_s"] = src or ""
    return out


def get_machine(name: str) -> MachineSpec:
    """A named machine preset; raises InputError naming the closest presets when unknown."""
    return _machine(name)[0]


def machine_sources(name: str) -> dict[str, str]:
    return dict(_machine(name)[1])


__all__ = ["get_machine", "list_machines", "machine_sources", "gpu_presets", "link_presets", "get_part",
           "part_names", "InputError"]


# A measured profile's values must lie in the physical ranges of their units (hwmodels.ranges): a profile outside
# them is a broken measurement or a typo, and would give garbage predictions with exit code 0.
PROFILE_RANGES = PHYSICAL_RANGES
MAX_PROFILE_BYTES = 4 * 2**20


RANGED_PARTS = ("gpu", "link", "storage", "host_memory", "cpu")


def profile_range(field: str, value) -> tuple[float, float] | None:
    """The accepted (low, high) of a profile field's value (a number or a mapping of numbers) when it lies outside
    them, else None (inside, or a field without a range)."""
    return out_of_range(field, value)


def check_machine(machine: MachineSpec, spec: str) -> None:
    """Every number of the machine (its parts, engine and peers' costs, compute grids) finite and in its range."""
    check_numbers(machine.model_dump(exclude={"sources", "description", "name"}), f"machine: profile {spec!r}",
                  "re-run 'offloadsim calibrate' or fix that value")


def load_machine(spec: str) -> MachineSpec:
    """A preset name or the path of a machine profile JSON (written by `offloadsim calibrate`), range-checked.

    An object with a `resolve()` method (the CLI's machine flags) resolves itself."""
    from pathlib import Path

    if hasattr(spec, "resolve"):
        return spec.resolve()

    from pydantic import ValidationError


    spec = str(spec)
    path = Path(spec)
    if spec.endswith(".json") or path.exists():
        if not path.exists():
            raise InputError(f"machine: profile file {spec!r} does not exist; give a preset name or a profile path.")
        data = load_json(path, "machine", MAX_PROFILE_BYTES, "re-run 'offloadsim calibrate'")
        if not isinstance(data, dict):
            raise InputError(f"machine: profile {spec!r} is not a JSON object; re-run 'offloadsim calibrate'.")
        try:
            machine = MachineSpec.model_validate(data.get("machine", data))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "file"
            raise InputError(f"machine: profile {spec!r} field {where!r} is invalid ({first['msg']}); re-run "
                             "'offloadsim calibrate' or fix that value.") from None
        check_machine(machine, spec)
        return machine
    return get_machine(spec)
