"""The engines, found as plug-ins: every subpackage of sim/engines with an `engine.py` defining ENGINE.

Deleting an engine's folder removes that engine and nothing else: nothing outside its package names it. Engines
are discovered on first use (not at import), so a module an engine imports may itself import this one.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections import OrderedDict
from importlib.util import find_spec
from pathlib import Path

from hwmodels.specs import MachineSpec
from hwmodels.units import InputError, unknown_name

_FOUND: dict = {}


def engines() -> dict:
    """name -> Engine, in their rank order (offloadsim's own first)."""
    if not _FOUND:
        found = []
        for m in pkgutil.iter_modules(__path__):
            if m.ispkg and find_spec(f"{__name__}.{m.name}.engine") is not None:
                found.append(importlib.import_module(f"{__name__}.{m.name}.engine").ENGINE)
        _FOUND.update((e.name, e) for e in sorted(found, key=lambda e: (e.rank, e.name)))
    return _FOUND


def installed_names() -> list[str]:
    """The engines' names, sorted, from their folders (each holding an engine.py) without importing any: cheap
    enough for a command line's argument parsing."""
    root = Path(__path__[0])
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg and (root / m.name / "engine.py").is_file())


def engine_names() -> list[str]:
    return list(engines())


def own_engine() -> str:
    """The engine the planner (planner/core.py) plans for: the one whose Engine.plans_itself is set."""
    return next(e.name for e in engines().values() if e.plans_itself)


def engine_of(name: str):
    """The engine called `name`; InputError naming the installed ones when there is none."""
    found = engines()
    if name not in found:
        raise unknown_name("engine", name, list(found))
    return found[name]


_COSTS: "OrderedDict[int, tuple]" = OrderedDict()


def costs_of(machine: MachineSpec, name: str):
    """`name`'s typed costs on this machine (None for an engine without host costs of its own). The machine's whole
    `peers` mapping is checked the first time (an unknown engine or field is refused with InputError) and the
    validated costs kept, keyed by the mapping's identity, so a hot loop does not validate again."""
    key = id(machine.peers)
    hit = _COSTS.get(key)
    if hit is None:
        hit = (machine.peers, check_peers(machine))
        _COSTS[key] = hit
        if len(_COSTS) > 64:
            _COSTS.popitem(last=False)
    return hit[1].get(name)


def check_peers(machine: MachineSpec) -> dict:
    """Every engine's typed costs on the machine: from its own values, else derived (Engine.costs_for)."""
    for name in machine.peers:
        if name not in engines():
            raise InputError(f"peers: {name!r} in machine {machine.name!r} is no installed engine (installed: "
                             f"{', '.join(engines())}); remove its table from the profile.")
    return {name: e.costs_for(machine) for name, e in engines().items() if e.costs_model is not None}


def with_costs(machine: MachineSpec, name: str, costs) -> MachineSpec:
    """The machine with `name`'s costs replaced by `costs` (a Costs model, or raw values)."""
    raw = costs if isinstance(costs, dict) else costs.model_dump(exclude_defaults=True)
    return machine.model_copy(update={"peers": {**machine.peers, name: raw}})
