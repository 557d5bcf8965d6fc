"""offloadsim's own streaming engine as a plug-in: the planner (planner/core.py) plans for it."""
from __future__ import annotations

from sim.engines.base import Engine
from sim.engines.offloadsim.placement import resident, stream
from sim.engines.offloadsim.pricing import OffloadsimPricing


class OffloadsimEngine(Engine):
    name = "offloadsim"
    label = "offloadsim's engine"
    rank = 0
    policy_rank = 4
    pricing_class = OffloadsimPricing
    plans_itself = True
    kv_homes = ("vram", "pinned", "pageable")  # a cache in RAM copied to the GPU per step (validate/stream_run.py)

    def policies(self) -> dict:
        return {"stream": stream, "resident": resident}


ENGINE = OffloadsimEngine()
