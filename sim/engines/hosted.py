"""What the peer engines share: they run a framework's loop around the layers, whose host costs (per token, per
module loaded, per unit) are measured on the real engine (validate/peer_calibration.py), and launch their GPU
kernels themselves. Accelerate, AirLLM and llama.cpp extend HostedCosts and HostedPricing."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat

from sim.costs.tiers import tier_row
from sim.engines.base import Costs, Kernels, Pricing
from sim.model.shapes import param_modules
from sim.run.items import GPU_LOAD

MMAP_HIT_BYTES_PER_S = 1e15  # a mapped page-cache hit where the host's map speed is not measured: no cost of its own


class HostedCosts(Costs):
    """Host-side costs of an engine beyond the pipeline it runs. Seconds on the compute lane unless said otherwise."""
    step_s: NonNegativeFloat = Field(default=0.0, description="Per forward step (token): the engine's generation loop "
                                     "around the layers.")
    load_module_s: NonNegativeFloat = Field(default=0.0, description="Per parameter-holding module of a unit loaded "
                                            "for one forward (hooks, per-tensor copies and freeing).")
    load_unit_s: NonNegativeFloat = Field(default=0.0, description="Per unit loaded for one forward (materialising "
                                          "the layer and cleaning up after it).")
    pin_each_load: bool = Field(default=False, description="Every load is copied into a pinned buffer (pin_memory(): "
                                "a host memcpy; PyTorch's caching host allocator reuses the pinned blocks).")
    mmap_reads: bool = Field(default=False, description="Weights on disk are memory-mapped and used in place: a "
                             "page-cache hit costs nothing beyond the copy or compute that touches it.")
    cpu_compute_scale: PositiveFloat = Field(default=1.0, description="The engine's CPU kernels against the machine's "
                                             "CPU compute grid: a CPU-computed unit takes this times the grid's time "
                                             "(a roofline, a bound, is not scaled).")
    gpu_compute_scale: PositiveFloat = Field(default=1.0, description="The engine's GPU kernels against the machine's "
                                             "GPU compute grid of its dispatch.")
    gpu_dispatch: Literal["eager", "graph"] = Field(default="eager", description="How its GPU kernels are launched: "
                                                    "one by one (eager) or replayed from captured CUDA graphs.")
    head_last_position: bool = Field(default=True, description="The output head computes the last position of each "
                                     "sequence only (transformers' generate passes logits_to_keep=1; llama.cpp "
                                     "outputs the last token of a batch), not the whole prompt.")



class HostedPricing(Pricing):
    """A hosted engine's hooks: its costs per load on the compute lane, a pinned copy per load where it pins, mapped
    reads, its kernels scaled against the grids."""
    per_op_offload = True

    def pays_step(self) -> bool:
        """Whether a token pays step_s: a run that computes on the GPU."""
        return any(p.compute == "gpu" for p in self.plan.placements)

    def cache_read_bytes_per_s(self) -> float:
        if self.costs.mmap_reads:
            return self.machine.host_memory.map_touch_bytes_per_s or MMAP_HIT_BYTES_PER_S
        return super().cache_read_bytes_per_s()

    def kernels(self) -> Kernels:
        c = self.costs
        return Kernels(dispatch=c.gpu_dispatch, scale={True: c.cpu_compute_scale, False: c.gpu_compute_scale},
                       last_only=c.head_last_position)

    def maps_rows(self) -> bool:
        return self.costs.mmap_reads

    def disk_module_s(self) -> float:
        """Per module of a unit computed on the CPU from disk, per forward."""
        return 0.0

    def disk_tensor_s(self) -> float:
        """Per tensor of a unit read from disk, per forward."""
        return 0.0

    def units_loaded(self, ui: int, gpu_load: bool) -> float:
        """How many times a unit's row pays load_unit_s."""
        return float(gpu_load)

    def loader_wait_s(self, ui: int, gpu_load: bool, copy_s: float, pins: bool) -> float:
        """Compute-lane seconds spent waiting for the engine's own loader."""
        return 0.0

    def load_costs(self, ui: int, tier: str, load: int, copy_s: float, pins: bool) -> tuple[float, float]:
        """A pinned copy per load on the loader; hooks, cleanup and its generation loop on the compute lane."""
        c, model = self.costs, self.model
        u = model.units[ui]
        gpu_load, disk = load == GPU_LOAD, bool(load) and tier_row(tier).reads_storage
        unpack = u.nbytes / self.machine.host_memory.memcpy_bytes_per_s if gpu_load and c.pin_each_load and pins \
            else 0.0
        mods = param_modules(u.kind, model.family)
        per_tensor = self.disk_tensor_s() if disk else 0.0
        hooks = c.load_module_s if gpu_load else self.disk_module_s() if disk else 0.0
        overhead = hooks * mods + c.load_unit_s * self.units_loaded(ui, gpu_load) + per_tensor * mods \
            + (c.step_s if ui == 0 and self.pays_step() else 0.0) + self.loader_wait_s(ui, gpu_load, copy_s, pins)
        return unpack, overhead
