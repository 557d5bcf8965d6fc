"""offloadsim's engine multiplying a CPU-held unit on the GPU: its KV cache moves there and the step's part back."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.costs.equations import kv_host_copy_s, kv_move_s
from sim.plan import Workload


def offload_kv_move_s(unit, machine: MachineSpec, w: Workload, s: int) -> float:
    """offloadsim's engine multiplying a CPU-held unit on the GPU for step `s`: the cache written before the step
    goes to the GPU, the step's own keys and values come back (sim.costs.equations.kv_move_s)."""
    kv = unit.kv_bytes_per_token * w.batch
    return kv_move_s(kv * (w.prompt_tokens + s - 1 if s else 0), machine) + \
        kv_move_s(kv * (1 if s else w.prompt_tokens), machine)


def link_at_s(unit, machine: MachineSpec, w: Workload, s: int) -> float:
    """When, into an offloaded unit's compute at step `s`, its cache's first transfer to the GPU needs the link:
    after the host copy of its keys (validate/stream_run.py, move_kv). -1 for a step with nothing written before."""
    if s == 0 or not unit.kv_bytes_per_token:
        return -1.0
    return kv_host_copy_s(unit.kv_bytes_per_token * w.batch * (w.prompt_tokens + s - 1) / 2, machine)
