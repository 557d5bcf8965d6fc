"""offloadsim's own engine in the schedule: CUDA-graph dispatch over a static cache, its stream threads' start-up
and per-item overheads (machine.engine, measured by calibrate), and a CPU-held layer multiplied on the GPU moving
its KV cache there and back (sim.engines.offloadsim.kv)."""
from __future__ import annotations

import numpy as np

from sim.engines.base import Pricing
from sim.engines.offloadsim.kv import link_at_s, offload_kv_move_s


class OffloadsimPricing(Pricing):
    static_cache = True

    def __init__(self, model, machine, plan, w, costs):
        super().__init__(model, machine, plan, w, costs)
        self.kv_moved = [self.tiers[u.name].compute == "cpu" for u in model.units]

    def startup_s(self) -> float:
        return self.machine.engine.stream_startup_s

    def load_costs(self, ui: int, tier: str, load: int, copy_s: float, pins: bool) -> tuple[float, float]:
        return 0.0, self.machine.engine.stream_overhead_s.get(tier, 0.0) if load else 0.0

    def compute_s(self, ui: int, cpu: bool, base_s: float, shape: tuple[int, int, int], s: int,
                  first_expert: bool) -> float:
        if self.kv_moved[ui] and not cpu:
            return base_s + offload_kv_move_s(self.model.units[ui], self.machine, self.w, s)
        return base_s

    def post_pass(self, sch) -> None:
        for k in np.flatnonzero(np.array(self.kv_moved)[sch.unit] & ~sch.on_cpu).tolist():
            sch.link_at_s[k] = link_at_s(self.model.units[int(sch.unit[k])], self.machine, self.w, int(sch.step[k]))
