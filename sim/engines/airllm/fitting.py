"""What validate/peer_calibration.py fits of AirLLM's costs on its measured runs: a cost per module it streams."""
from __future__ import annotations

from sim.engines.airllm.loader import airllm_modules
from sim.engines.base import Costs
from sim.engines.measured import Fitting, PeerRun
from sim.model.shapes import ModelShape


class AirllmFitting(Fitting):
    params = ("load_unit_s",)

    def counts(self, model: ModelShape, run: PeerRun, spec: Costs | None) -> dict[str, float]:
        """Per token: each module AirLLM streams and cleans up (airllm_modules)."""
        return {"load_unit_s": float(sum(airllm_modules(u, model.tied_head) for u in model.units))}


FITTING = AirllmFitting()
