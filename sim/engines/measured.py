"""Measured runs of a real engine and what fitting its costs on them asks of the engine (its Fitting).

A PeerRun is one run the real engine was timed on: its plan, workload, budgets and what it measured. The simulator
predicts it (predict) with the engine's costs of the machine. An engine whose costs are fitted on such runs
(validate/peer_calibration.py) says through Engine.fitting which fields are fitted and how often a run pays each.
No torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hwmodels.specs import MachineSpec
from sim.engines import costs_of, engine_of, with_costs
from sim.engines.base import Costs
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload
from sim.run.simulate import fast_simulate


@dataclass(frozen=True)
class PeerRun:
    label: str
    plan: Plan
    workload: Workload
    budgets: Budgets
    measured_tpot_s: float
    measured_ttft_s: float
    graphs_warm: bool = False  # an identical run just before left the engine's graphs captured (llama-bench's reps)
    peer_update: dict = field(default_factory=dict)  # how the engine that ran differs, e.g. its build's kernels


def with_peer(machine: MachineSpec, engine: str, spec: Costs) -> MachineSpec:
    """The machine with `engine`'s costs replaced by `spec` (sim.engines.with_costs)."""
    return with_costs(machine, engine, spec)


def fitting_of(engine: str) -> "Fitting":
    """What `engine` fits of its costs (Engine.fitting): nothing where it has none."""
    return engine_of(engine).fitting or Fitting()


def predict(model: ModelShape, machine: MachineSpec, run: PeerRun) -> dict:
    """The simulator's summary of the run, priced with the engine's costs of the machine as the run's engine differed
    (Fitting.run_update)."""
    peer = costs_of(machine, run.plan.engine)
    update = fitting_of(run.plan.engine).run_update(run, peer)
    if update and peer is not None:
        machine = with_peer(machine, run.plan.engine, peer.model_copy(update=update))
    return fast_simulate(model, machine, run.plan, run.workload, run.budgets)


def measured(run: PeerRun) -> tuple[str, float]:
    """What a run measured: its time per token, or its first token where it timed that alone (a prompt test)."""
    return ("time_per_token_s", run.measured_tpot_s) if np.isfinite(run.measured_tpot_s) \
        else ("ttft_s", run.measured_ttft_s)


def floor_pct(times: list[float]) -> float:
    """How far one setting timed several times moved, as the least worst |error| any single prediction of them can
    reach (%): halfway in ratio between the fastest and the slowest, (max - min) / (max + min)."""
    return 100 * (max(times) - min(times)) / (max(times) + min(times))


def fit_scalar(engine: str, runs: list[tuple[ModelShape, MachineSpec, PeerRun]], spec_of, bounds) -> float:
    """The value x in `bounds` whose peer costs spec_of(x) best explain `runs`: least squares of the log of
    predicted over measured (a run twice as slow weighs as one twice as fast), over log x (scipy's bounded
    minimize_scalar)."""
    from scipy.optimize import minimize_scalar

    def loss(log_x: float) -> float:
        s = spec_of(float(np.exp(log_x)))
        errs = [np.log(predict(model, with_peer(m, engine, s), r)[measured(r)[0]] / measured(r)[1])
                for model, m, r in runs]
        return float(np.sum(np.square(errs)))
    lo, hi = np.log(bounds)
    return float(np.exp(minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4}).x))


class Fitting:
    """What validate/peer_calibration.py fits of an engine's costs on runs of the real engine, and how often a run
    pays each fitted cost (per token). The defaults: nothing fitted."""
    params: tuple[str, ...] = ()  # the fitted fields of the engine's costs
    scales: frozenset = frozenset()  # multipliers: neutral 1 and started there, not from the linear estimate
    rates: dict = {}  # speeds (field -> the machine's CPU attribute they start at): their inverses are solved for
    nonlinear: tuple[str, ...] = ()  # not additive: left to the least squares, absent in the linear start
    optional_rates: tuple[str, ...] = ()  # speeds left absent when no run streams at them
    measured_by_some: tuple[str, ...] = ()  # costs left absent (their default) when no run pays them

    def run_update(self, run: PeerRun, peer: Costs | None) -> dict:
        """How the engine that ran differs from the machine's costs `peer` (PeerRun.peer_update)."""
        return dict(run.peer_update)

    def counts(self, model: ModelShape, run: PeerRun, spec: Costs | None) -> dict[str, float]:
        """How many times per token the run pays each fitted cost (a speed's: whether the run measures it)."""
        return {}

    def features(self, model: ModelShape, run: PeerRun, params: tuple[str, ...],
                 spec: Costs | None = None) -> np.ndarray:
        """counts() of `params`, in their order; `spec`: the costs the run is priced with (the defaults if none)."""
        count = self.counts(model, run, spec)
        return np.array([count[p] for p in params])

    def rate_bytes(self, model: ModelShape, plan: Plan, machine: MachineSpec, spec: Costs,
                   batch: int = 1) -> dict[str, float]:
        """Bytes per decode step of `batch` sequences streamed at each of the engine's CPU speeds (optional_rates)."""
        return {}

    def nonlinear_start(self, runs: list[tuple[ModelShape, MachineSpec, PeerRun]], start: dict,
                        params: tuple[str, ...]) -> dict[str, float]:
        """Where the least squares starts the nonlinear fields among `params`, from the linear start `start`."""
        return {}
