"""Accelerate's hooks in the schedule: transformers' generate loop every token, its hooks per module copied in, and
its disk offload (each tensor's file opened and mapped anew, each CPU module's hooks)."""
from __future__ import annotations

from sim.engines.hosted import HostedPricing


class AcceleratePricing(HostedPricing):
    def pays_step(self) -> bool:
        """transformers' generate loop runs on either device (on the 2-core development machine it took 5.6 ms a
        token of a CPU run, lab/data/peers/cpu-layer-devbox.json)."""
        return True

    def disk_module_s(self) -> float:
        return self.costs.hook_module_s

    def disk_tensor_s(self) -> float:
        return self.costs.disk_tensor_s + self.costs.disk_header_entry_s * self.model.tensors_per_shard
