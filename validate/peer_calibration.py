"""A peer engine's host costs (machine.peers) fitted on measured runs of the real engine.

The engine model (its package under sim/engines: the placement and the schedule hooks) predicts each run from the
machine profile with the peer's costs at zero; what the real engine took beyond that is, per token, a non-negative
combination of the peer's cost parameters times how often the run pays each (per step, per module loaded, per unit
loaded), solved by non-negative least squares (scipy.optimize.nnls) over the calibration runs. What is fitted and
how often a run pays it is the engine's own (Engine.fitting, a sim.engines.measured.Fitting); nothing here names an
engine. Runs not used here are the held-out check (lab/reports/peers_report.py). No torch: runs are given as plans
and measured times.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares, nnls

from hwmodels.specs import MachineSpec
from sim.engines import costs_of
from sim.engines.base import Costs
from sim.engines.measured import PeerRun, fit_scalar, fitting_of, floor_pct, measured, predict, with_peer
from sim.model.shapes import ModelShape
from sim.plan import Plan

__all__ = ["PeerRun", "features", "fit", "fit_scalar", "fitting_of", "floor_pct", "identifiable", "measured",
           "predict", "rate_bytes", "with_peer"]


def features(model: ModelShape, run: PeerRun, params: tuple[str, ...], spec: Costs | None = None) -> np.ndarray:
    """How many times per token the run pays each parameter, as sim.run.schedule prices it (its engine's
    Fitting.features); `spec`: the peer's costs the run is priced with, the defaults if none."""
    return fitting_of(run.plan.engine).features(model, run, params, spec)


def rate_bytes(model: ModelShape, plan: Plan, machine: MachineSpec, spec: Costs, batch: int = 1) -> dict[str, float]:
    """Bytes per decode step of `batch` sequences the plan's CPU units stream at each of its engine's CPU speeds
    (Fitting.rate_bytes)."""
    return fitting_of(plan.engine).rate_bytes(model, plan, machine, spec, batch)


def identifiable(params: tuple[str, ...], runs: list[tuple[ModelShape, MachineSpec, PeerRun]],
                 spec: Costs) -> tuple[str, ...]:
    """`params` less the speeds no run streams at (Fitting.optional_rates: they stay absent, and the others hold
    for every plan), and the costs no run pays (Fitting.measured_by_some, e.g. those of several sequences decoded
    together: they keep their defaults)."""
    fitting = fitting_of(runs[0][2].plan.engine)
    # an engine whose parameters hold neither (its costs have no optional speeds) has nothing to drop
    seen = {p for model, m, r in runs for p, b in fitting.rate_bytes(model, r.plan, m, spec, r.workload.batch).items()
            if b > 0} if set(params) & set(fitting.optional_rates) else set()
    paid = {p for model, m, r in runs
            for p, n in zip(fitting.measured_by_some, fitting.features(model, r, fitting.measured_by_some, spec))
            if n} if set(params) & set(fitting.measured_by_some) else set()
    return tuple(p for p in params if (p not in fitting.optional_rates or p in seen)
                 and (p not in fitting.measured_by_some or p in paid))


def fit(engine: str, runs: list[tuple[ModelShape, MachineSpec, PeerRun]]) -> Costs:
    """The peer's parameters (its Fitting.params) that best explain `runs` (relative error of what each measured,
    its time per token or its first token alone, least squares through the simulator): costs >= 0, started from the
    linear estimate on the per-token runs (residual = costs x counts + bytes / rates, the rates' inverses solved
    for); kernel scales >= 0.05, started from 1; kernel rates > 0, started at the machine's CPU values where no run
    streams at them."""
    fitting = fitting_of(engine)
    scales, rates_of, nonlinear = fitting.scales, fitting.rates, fitting.nonlinear
    cpu, spec0 = runs[0][1].cpu, costs_of(runs[0][1], engine)
    params = identifiable(fitting.params, runs, spec0)
    unmeasured = {p: type(spec0).model_fields[p].default for p in fitting.params
                  if p in fitting.optional_rates + fitting.measured_by_some and p not in params}
    costs = tuple(p for p in params if p not in scales and p not in rates_of)
    rates = tuple(p for p in params if p in rates_of and p not in nonlinear)
    start = {p: float(getattr(cpu, rates_of[p])) if p in rates_of else 1.0 if p in scales else 0.0 for p in params}
    # the rates' time left to the solve; a speed no run measures stays absent (not a stale value of the profile's)
    base = spec0.model_copy(update={**start, **dict.fromkeys(rates, 1e30), **unmeasured,
                                    **dict.fromkeys(set(nonlinear) & set(params))})  # the roofline meanwhile
    per_token = [(model, m, r) for model, m, r in runs if np.isfinite(r.measured_tpot_s)]
    A = np.array([[*fitting.features(model, r, costs, spec0),
                   *(fitting.rate_bytes(model, r.plan, m, spec0, r.workload.batch)[p] for p in rates)]
                  for model, m, r in per_token])
    b = np.array([r.measured_tpot_s - predict(model, with_peer(m, engine, base), r)["time_per_token_s"]
                  for model, m, r in per_token])
    used = [i for i in range(A.shape[1] if A.size else 0) if A[:, i].any()]  # scipy's nnls aborts on zero columns
    if used:
        names = [(costs + rates)[i] for i in used]
        x = nnls(A[:, used], np.maximum(b, 0.0))[0]
        start.update({p: (1.0 / v if v > 0 else start[p]) if p in rates_of else v for p, v in zip(names, x)})
    start.update(fitting.nonlinear_start(runs, start, params))
    x0 = np.array([start[p] for p in params])
    lower = np.array([0.05 if p in scales else 1e-6 * x0[i] if p in rates_of else 0.0 for i, p in enumerate(params)])

    def spec(x: np.ndarray) -> Costs:
        return base.model_copy(update={p: float(v) for p, v in zip(params, x)})

    def residuals(x: np.ndarray) -> np.ndarray:
        s = spec(np.maximum(x, lower))
        return np.array([predict(model, with_peer(m, engine, s), r)[measured(r)[0]] / measured(r)[1] - 1
                         for model, m, r in runs])
    res = least_squares(residuals, x0, bounds=(lower, np.inf), x_scale=np.maximum(x0, 1e-3), diff_step=1e-3)
    return spec(res.x)
