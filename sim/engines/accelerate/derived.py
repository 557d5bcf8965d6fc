"""Accelerate's costs on a machine they were not fitted on: the reference machine's (sim.engines.reference) as
fitted. They are transformers' and Accelerate's Python per token, per module and per tensor opened, and its CPU
kernels against the machine's own CPU grid (cpu_compute_scale): none scales with a part the presets describe."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.engines.accelerate.costs import AccelerateCosts
from sim.engines.base import validate_costs
from sim.engines.reference import own_or_reference


def costs_for(machine: MachineSpec) -> AccelerateCosts:
    """Accelerate's costs on `machine`: its own table where it has one, else the reference machine's."""
    return validate_costs("accelerate", AccelerateCosts, own_or_reference(machine, "accelerate")[0])
