"""How far a prediction rests on the host's repeatability: the time per token again with every CPU grid at the fast
and at the slow end of the spread `calibrate` measured for it (ComputeGrid.spread: the CPU timed in interleaved
rounds moved by 5-22% on the H200 test host, docs/validation.md).

Only CPU compute carries a measured spread; a plan that computes nothing on the CPU, or a profile whose CPU grids
were timed once, gets no range.
"""
from __future__ import annotations

import numpy as np

from hwmodels.profiles import ComputeGrid
from hwmodels.specs import MachineSpec
from sim.plan import Budgets, Plan, Workload
from sim.shapes import ModelShape


def _scaled(g: ComputeGrid, f: float) -> ComputeGrid:
    return g.model_copy(update={"prefill_s": tuple(tuple(v * f for v in row) for row in g.prefill_s),
                                "decode_s": tuple(tuple(v * f for v in row) for row in g.decode_s)})


def cpu_spread(machine: MachineSpec) -> float | None:
    """The median spread of the machine's CPU grids, None when none was timed in rounds."""
    spreads = [g.spread for g in machine.compute_grids if g.device == "cpu" and g.spread is not None]
    return float(np.median(spreads)) if spreads else None


def cpu_range(model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload, budgets: Budgets) -> dict | None:
    """{'spread': s, 'time_per_token_s': (fast, slow)}: the time per token with every CPU grid x (1 - s/2) and
    x (1 + s/2); None when the plan computes nothing on the CPU or the spread was not measured."""
    from sim.fast import Unsupported
    from sim.simulate import fast_simulate, simulate
    s = cpu_spread(machine)
    if s is None or not any(p.compute == "cpu" for p in plan.placements):
        return None
    out = []
    for f in (1 - s / 2, 1 + s / 2):
        grids = tuple(_scaled(g, f) if g.device == "cpu" else g for g in machine.compute_grids)
        m = machine.model_copy(update={"compute_grids": grids})
        try:
            out.append(fast_simulate(model, m, plan, w, budgets)["time_per_token_s"])
        except Unsupported:  # a SimPy-only feature (several reader threads)
            out.append(simulate(model, m, plan, w, budgets).summary["time_per_token_s"])
    return {"spread": s, "time_per_token_s": (out[0], out[1])}
