"""The machine the peer engines' costs are fitted on, and its fitted tables: where a machine has no table of its own
for an engine, that engine's costs are derived from these and the machine's parts (each engine's derived.py)."""
from __future__ import annotations

from hwmodels.presets import get_machine
from hwmodels.specs import MachineSpec

REFERENCE_MACHINE = "h200-testbox"  # hwmodels/data/machines.toml: [h200-testbox.peers.*], lab/journal/peers.md


def reference_machine() -> MachineSpec:
    return get_machine(REFERENCE_MACHINE)


def own_or_reference(machine: MachineSpec, engine: str) -> tuple[dict, bool]:
    """(the raw costs, whether they are the machine's own): the machine's table for `engine` where it has one,
    else the reference machine's."""
    own = machine.peers.get(engine)
    if own:
        return own, True
    return reference_machine().peers.get(engine, {}), False
