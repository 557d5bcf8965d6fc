"""AirLLM's measured costs (`calibrate --peer airllm` times its cleanup after each module)."""
from __future__ import annotations

from pydantic import Field, NonNegativeFloat

from sim.engines.hosted import HostedCosts


class AirllmCosts(HostedCosts):
    """AirLLM 4.0's host costs: a pinned copy of each layer it loads, memory-mapped layer files, and its cleanup
    after each module it streams (load_unit_s, per module: sim.engines.airllm.loader.airllm_modules)."""
    pin_each_load: bool = Field(default=True, description="Every load is copied into a pinned buffer (airllm_base.py: "
                                "pin_memory() of each layer).")
    mmap_reads: bool = Field(default=True, description="Its layer files are memory-mapped (safetensors load_file).")
    load_unit_s: NonNegativeFloat = Field(default=0.0, description="Per module it streams, per forward: its cleanup "
                                          "(gc.collect, malloc_trim, empty_cache; calibrate --peer airllm times it).")
