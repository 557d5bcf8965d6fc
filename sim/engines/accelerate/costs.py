"""Accelerate's measured costs (validate/peer_calibration.py fits step_s, load_module_s and cpu_compute_scale on
runs of transformers + Accelerate; `calibrate --peer accelerate` times the disk costs)."""
from __future__ import annotations

from pydantic import Field, NonNegativeFloat

from sim.engines.hosted import HostedCosts


class AccelerateCosts(HostedCosts):
    """Accelerate's host costs: transformers' generate loop (step_s, every run), its hooks per module copied in
    (load_module_s) and its disk offload (per tensor opened, per CPU module's hooks)."""
    mmap_reads: bool = Field(default=True, description="Weights offloaded to disk are memory-mapped (utils/offload.py, "
                             "np.memmap) and used in place.")
    disk_tensor_s: NonNegativeFloat = Field(default=0.0, description="Per tensor of a unit offloaded to disk, per "
                                            "forward, beyond its pages' map cost: Accelerate opens the safetensors "
                                            "file and maps it anew for each tensor (calibrate measures it).")
    disk_header_entry_s: NonNegativeFloat = Field(default=0.0, description="The same per entry of the file's header "
                                                  "(parsed at every open): shards of SHARD_BYTES assumed.")
    hook_module_s: NonNegativeFloat = Field(default=0.0, description="Per parameter-holding module of a unit "
                                            "offloaded to disk and computed on the CPU, per forward: Accelerate's "
                                            "AlignDevicesHook sets each tensor on the execution device before the "
                                            "forward and back on meta after it (calibrate --peer accelerate "
                                            "times it: sim/engines/accelerate/hook_cost.py). A unit loaded to the "
                                            "GPU pays load_module_s.")
