"""AirLLM's costs on a machine they were not fitted on: the reference machine's (sim.engines.reference) as fitted:
its cleanup after each module (gc.collect, malloc_trim, empty_cache) is Python on one core, which no part the
presets describe scales."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.engines.airllm.costs import AirllmCosts
from sim.engines.base import validate_costs
from sim.engines.reference import own_or_reference


def costs_for(machine: MachineSpec) -> AirllmCosts:
    """AirLLM's costs on `machine`: its own table where it has one, else the reference machine's."""
    return validate_costs("airllm", AirllmCosts, own_or_reference(machine, "airllm")[0])
