"""A plan exported as the arguments of the engine that will run it (Engine.export in the engine's package:
Accelerate's device_map and max_memory, llama.cpp's -ngl/-ot arguments). Where an engine cannot express a placement
(streaming, per-expert tiers) the export takes the nearest one it can and says so in `notes`."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from hwmodels.units import InputError
from sim.engines import engine_of, engines
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload


def export_formats() -> list[str]:
    """The installed engines that take a placement as arguments."""
    return [name for name, e in engines().items() if e.exports]


def export_plan(fmt: str, model: ModelShape, plan: Plan, w: Workload, machine: MachineSpec, budgets: Budgets) -> dict:
    """The plan as engine `fmt`'s arguments: a dict with its own keys and 'notes'."""
    e = engine_of(fmt)
    if not e.exports:
        raise InputError(f"export: {e.label} takes no placement as arguments; export as one of "
                         f"{', '.join(export_formats())}.")
    return e.export(model, plan, w, machine, budgets)
