"""How far a prediction rests on the host's repeatability: the time per token again with every CPU grid at the two
ends of a 90% prediction interval for a later run on the host, from the spread `calibrate` measured for it
(ComputeGrid.spread: (slowest - fastest) / median over CALIBRATE_ROUNDS interleaved rounds; 5-22% on the H200 test
host, lab/journal/validation.md).

The spread is the range of a few draws of the host's speed. Read as normal draws, the range of n of them is d2(n)
standard deviations on average (d2(3) = 3 / sqrt(pi)), and a later draw lies within z * sigma * sqrt(1 + 1/n) of
their mean with probability COVERAGE (z its two-sided normal quantile): for 3 rounds, 1.12 spreads either side.
The interval is the host's drift alone, not the model's own error. An earlier version spanned half a spread either side.
Measured coverage (lab/probes/interval_coverage.py; nothing fitted: the factor is the normal theory's for 3 draws): of
the 17 exported Accelerate plans of lab/data/peers/peers-{d..i}.json that computed on the CPU, 6 fell inside the earlier
interval and 14 inside this one. Of the 43 validation runs of offloadsim's engine with CPU compute on the critical path
(lab/data/validation/matrix/matrix-{k..q}.json), 17 and 25 did; the rest are the model's own misses.

Only CPU compute carries a measured spread; a plan that computes nothing on the CPU (or whose CPU work every step
moves to the GPU), or a profile whose CPU grids were timed once, gets no range. A peer whose own CPU kernels are
priced instead of the grids (llama.cpp's measured streaming speed) takes the same host factor on its CPU speeds.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy import integrate, stats

from hwmodels.profiles import ComputeGrid
from hwmodels.specs import MachineSpec
from sim.engines import costs_of, with_costs
from sim.plan import Budgets, Plan, Workload
from sim.model.shapes import ModelShape
from sim.run.fast import Unsupported
from sim.run.simulate import fast_simulate, simulate


def _scaled(g: ComputeGrid, f: float) -> ComputeGrid:
    return g.model_copy(update={"prefill_s": tuple(tuple(v * f for v in row) for row in g.prefill_s),
                                "decode_s": tuple(tuple(v * f for v in row) for row in g.decode_s)})


CALIBRATE_ROUNDS = 3  # calibrate times every CPU grid in this many interleaved rounds (validate/calibrate_compute.py)
COVERAGE = 0.90


@functools.lru_cache(maxsize=8)
def expected_range(n: int) -> float:
    """d2(n): the mean range of n standard normal draws, the integral of 1 - Phi^n - (1 - Phi)^n."""
    f = lambda x: 1.0 - stats.norm.cdf(x) ** n - stats.norm.sf(x) ** n  # noqa: E731
    return integrate.quad(f, -np.inf, np.inf)[0]


def interval_factor(n: int = CALIBRATE_ROUNDS, coverage: float = COVERAGE) -> float:
    """Half-width of the prediction interval for one later draw, in spreads (ranges of n draws)."""
    z = stats.norm.ppf(0.5 + coverage / 2)
    return z * math.sqrt(1 + 1 / n) / expected_range(n)


def cpu_spread(machine: MachineSpec) -> float | None:
    """The median spread of the machine's CPU grids, None when none was timed in rounds."""
    spreads = [g.spread for g in machine.compute_grids if g.device == "cpu" and g.spread is not None]
    return float(np.median(spreads)) if spreads else None


def cpu_range(model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload, budgets: Budgets,
              factor: float | None = None) -> dict | None:
    """{'spread': s, 'coverage': COVERAGE, 'time_per_token_s': (fast, slow)}: the time per token with every CPU grid
    x (1 - k s) and x (1 + k s), k = `factor` or interval_factor() (at least 5% of the grid's time at the fast end);
    None when the plan computes nothing on the CPU or the spread was not measured."""
    s = cpu_spread(machine)
    if s is None or not any(p.compute == "cpu" for p in plan.placements):
        return None
    out, k = [], interval_factor() if factor is None else factor
    for f in (max(1 - k * s, 0.05), 1 + k * s):
        grids = tuple(_scaled(g, f) if g.device == "cpu" else g for g in machine.compute_grids)
        m = machine.model_copy(update={"compute_grids": grids, "peers": _peers_scaled(machine, plan.engine, f)})
        try:
            out.append(fast_simulate(model, m, plan, w, budgets)["time_per_token_s"])
        except Unsupported:  # a SimPy-only feature (several reader threads)
            out.append(simulate(model, m, plan, w, budgets).summary["time_per_token_s"])
    if out[1] - out[0] <= 1e-9 * out[1]:  # the CPU's work is off the critical path (every step offloaded)
        return None
    return {"spread": s, "coverage": COVERAGE, "time_per_token_s": (out[0], out[1])}


def _peers_scaled(machine: MachineSpec, engine: str, f: float) -> dict:
    """The machine's peers with `engine`'s own CPU kernels (where it has them, priced instead of the grids) at the
    same host speed x 1/f (HostedCosts.host_scaled: its rates / f, its CPU costs x f)."""
    costs = costs_of(machine, engine)
    scaled = costs.host_scaled(1 / f) if costs is not None else None
    if scaled is None:
        return machine.peers
    return with_costs(machine, engine, scaled).peers
