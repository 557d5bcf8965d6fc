"""AirLLM's hooks in the schedule: its cleanup per module streamed, pins up to its limit, its hooks' waits for the
loader thread, and the longer waits of reads that miss the page cache (sim.engines.airllm.loader)."""
from __future__ import annotations

from sim.engines.airllm.loader import airllm_cold_waits, airllm_loader_wait_s, airllm_modules, airllm_pins
from sim.engines.hosted import HostedPricing


class AirllmPricing(HostedPricing):
    def pins(self, u) -> bool:
        return airllm_pins(u)

    def units_loaded(self, ui: int, gpu_load: bool) -> float:
        return airllm_modules(self.model.units[ui], self.model.tied_head)

    def loader_wait_s(self, ui: int, gpu_load: bool, copy_s: float, pins: bool) -> float:
        if gpu_load and not self.model.is_moe and pins:
            return airllm_loader_wait_s(self.model.units[ui], self.machine, copy_s, 0.0, self.costs.load_unit_s)
        return 0.0

    def post_pass(self, sch) -> None:
        if not self.model.is_moe:
            airllm_cold_waits(sch, self.model, self.machine, self.costs.load_unit_s)
