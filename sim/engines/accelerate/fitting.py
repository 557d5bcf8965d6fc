"""What validate/peer_calibration.py fits of Accelerate's costs on its measured runs: a cost per step and per module
its hooks load, and a scale on its CPU compute."""
from __future__ import annotations

from sim.costs.tiers import tier_row
from sim.engines.base import Costs
from sim.engines.measured import Fitting, PeerRun
from sim.model.shapes import ModelShape, param_modules


class AccelerateFitting(Fitting):
    params = ("step_s", "load_module_s", "cpu_compute_scale")
    scales = frozenset({"cpu_compute_scale"})

    def counts(self, model: ModelShape, run: PeerRun, spec: Costs | None) -> dict[str, float]:
        """Per token: one step, and each module of the units the GPU computes from a tier it does not hold."""
        t = run.plan.tiers()
        loaded = [u for u in model.units if not tier_row(t[u.name].tier).resident and t[u.name].compute == "gpu"]
        return {"step_s": 1.0, "load_module_s": float(sum(param_modules(u.kind, model.family) for u in loaded))}


FITTING = AccelerateFitting()
