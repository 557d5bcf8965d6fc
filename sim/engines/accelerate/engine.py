"""Accelerate (transformers' device_map) as a plug-in engine."""
from __future__ import annotations

from sim.engines.accelerate.costs import AccelerateCosts
from sim.engines.accelerate.export import to_accelerate
from sim.engines.accelerate.placement import accelerate
from sim.engines.accelerate.planning import best_accelerate_map
from sim.engines.accelerate.pricing import AcceleratePricing
from sim.engines.base import Engine


class AccelerateEngine(Engine):
    name = "accelerate"
    label = "Accelerate"
    rank = 1
    costs_model = AccelerateCosts
    unmeasured_source = (
        'Accelerate hooks.py (AlignDevicesHook): blocking pageable copies per module, disk offload through '
        'np.memmap (utils/offload.py); costs not measured on this machine')
    pricing_class = AcceleratePricing
    exports = True

    def policies(self) -> dict:
        return {"accelerate": accelerate}

    def best_plan(self, model, machine, w, budgets, objective: str = "token"):
        return best_accelerate_map(model, machine, w, budgets, objective)

    def export(self, model, plan, w, machine, budgets) -> dict:
        return to_accelerate(model, plan, w, budgets.vram_bytes, budgets.ram_bytes)


ENGINE = AccelerateEngine()
