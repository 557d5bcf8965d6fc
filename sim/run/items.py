"""The schedule: every item of a request (one unit computed at one step), as columns in execution order.

`sim.run.schedule.build_schedule` lays them out; the SimPy timeline, the fast evaluator and the engine read them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.costs.memory import MemoryUse

GPU_LOAD, CPU_READ = 1, 2
COLUMNS = {"unit": np.int64, "step": np.int64, "on_cpu": np.bool_, "load": np.int64, "read_bytes": np.float64,
           "unpack_s": np.float64, "copy_s": np.float64, "copy_bytes": np.float64, "compute_s": np.float64,
           "pinned_slot": np.bool_, "blocking": np.bool_, "overhead_s": np.float64, "gate": np.int64,
           "link_at_s": np.float64, "fault_s": np.float64, "gpu": np.int64}


@dataclass
class Schedule:
    """Columns, one entry per item, in execution order."""
    names: list[str] = field(default_factory=list)       # unit names (index by unit)
    unit: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    on_cpu: list[bool] = field(default_factory=list)
    load: list[int] = field(default_factory=list)        # 0, GPU_LOAD or CPU_READ
    read_bytes: list[float] = field(default_factory=list)  # stored bytes read from disk (0: no read)
    unpack_s: list[float] = field(default_factory=list)
    copy_s: list[float] = field(default_factory=list)
    copy_bytes: list[float] = field(default_factory=list)
    compute_s: list[float] = field(default_factory=list)
    pinned_slot: list[bool] = field(default_factory=list)
    blocking: list[bool] = field(default_factory=list)   # the copy waits for the previous item's compute to end
    overhead_s: list[float] = field(default_factory=list)  # the engine's host cost of a streamed item, on the compute lane
    gate: list[int] = field(default_factory=list)        # item whose compute end gates this load (router), or -1
    # seconds into the item's compute at which it needs the link to the GPU (a CPU-held unit multiplied there moves
    # its cache over it, sim.run.pipeline); -1: never
    link_at_s: list[float] = field(default_factory=list)
    # of overhead_s, the seconds the engine's loader spends faulting the item's weights in from disk (AirLLM's cold
    # reads: airllm_cold_waits); the timeline records them as a cold read on the storage lane
    fault_s: list[float] = field(default_factory=list)
    gpu: list[int] = field(default_factory=list)          # the GPU that computes the item and copies its load
    n_steps: int = 0
    startup_s: float = 0.0                               # no load starts before this (the engine's stage threads)
    contention: float = 1.0                              # CPU compute runs this many times slower while a copy runs
    read_latency_s: float = 0.0
    cold_bytes_per_s: float = 1.0
    cache_bytes_per_s: float = 1.0
    cache_capacity_bytes: float = 0.0
    warm_keys: list[tuple] = field(default_factory=list)  # (unit, bytes, active) in the page cache at start, oldest first
    # the engine's loader reads by faulting mapped pages in inside its pin copies (AirLLM): its reads cost the reader
    # lane only their page-cache part, their cold part is priced in the wait for the loader (airllm_cold_waits)
    loader_faults: bool = False
    memory: MemoryUse | None = None
    compute_sources: dict[str, str] = field(default_factory=dict)  # unit kind@device -> 'profile' or 'roofline'

    def __len__(self) -> int:
        return len(self.unit)

    def finalize(self) -> "Schedule":
        """Turn the columns into numpy arrays (the fast evaluator reads them without conversion)."""
        if len(self.gpu) == 0:  # a schedule laid out for one GPU
            self.gpu = [0] * len(self.unit)
        for name, dtype in COLUMNS.items():
            setattr(self, name, np.asarray(getattr(self, name), dtype=dtype))
        return self

    def column_lists(self) -> dict[str, list]:
        """The columns as Python lists (fast scalar access for the SimPy processes)."""
        return {name: getattr(self, name).tolist() for name in COLUMNS}


ROW_NAMES = ("on_cpu", "load", "read_bytes", "unpack_s", "copy_s", "copy_bytes", "pinned_slot", "blocking", "overhead_s")
