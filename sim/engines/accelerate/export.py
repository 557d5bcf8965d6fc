"""Accelerate's export of a plan: a device_map and max_memory for transformers' from_pretrained, and the reverse (a
device_map transformers chose, as tiers). Where Accelerate cannot express a placement the export takes the nearest
and says so in `notes`."""
from __future__ import annotations

from hwmodels.units import GiB, InputError
from sim.costs.memory import activation_bytes, kv_cache_bytes, resident_weight_bytes
from sim.costs.tiers import tier_row
from sim.plan import Plan, Workload
from sim.model.shapes import ModelShape
from sim.engines.accelerate.device_map import hf_module, plan_device_map

# where a device_map's values put a module: the GPU, RAM (pageable: Accelerate copies from it), the offload folder
HF_DEVICE_TIERS = {"0": "vram", "cuda": "vram", "cuda:0": "vram", "cpu": "ram_pageable", "disk": "disk_raw"}


def tiers_from_device_map(model: ModelShape, device_map: dict, on_gpu: bool = True) -> dict[str, str]:
    """Each unit's tier in a device_map transformers chose (`model.hf_device_map`): the value of the longest key
    that is its module or a prefix of it; the head unit's from `lm_head`, not from the final norm it also holds,
    which Accelerate places on its own. An empty map is one device: the GPU where `on_gpu`, else RAM."""
    if not device_map:
        return {u.name: "vram" if on_gpu else "ram_pageable" for u in model.units}
    out = {}
    for u in model.units:
        mod = hf_module(model, u.modules[-1] if u.kind == "lm_head" else u.modules[0])
        keys = [k for k in device_map if k == "" or mod == k or mod.startswith(k + ".")]
        if not keys:
            raise InputError(f"device_map: no key covers module {mod!r}; give its device, or a prefix of it.")
        dev = str(device_map[max(keys, key=len)])
        if dev not in HF_DEVICE_TIERS:
            raise InputError(f"device_map: device {dev!r} of {mod!r} is not 0, 'cpu' or 'disk'; this tool models one "
                             "GPU.")
        out[u.name] = HF_DEVICE_TIERS[dev]
    return out


def to_accelerate(model: ModelShape, plan: Plan, workload: Workload, vram_bytes: int, ram_bytes: int) -> dict:
    """{'device_map': {module: 0 | 'cpu' | 'disk'}, 'max_memory': {0: '..GiB', 'cpu': '..GiB'}, 'notes': [...]}."""
    device_map, notes = plan_device_map(model, plan)
    if all(p.compute == "cpu" for p in plan.placements):
        notes.append("nothing is on the GPU: Accelerate runs the whole model on the CPU.")
    elif any(p.compute == "cpu" for p in plan.placements):
        notes.append("Accelerate computes offloaded modules on the GPU; units the plan computes on the CPU are "
                     "mapped to 'cpu' (offloaded) and will be copied in each forward.")
    if any(tier_row(p.tier).compressed for p in plan.placements):
        notes.append("Accelerate has no lossless compressed tier; compressed units are mapped to their raw tier.")
    weights_gpu = resident_weight_bytes(model, plan)
    headroom = kv_cache_bytes(model, workload) + activation_bytes(model, workload)
    max_memory = {0: f"{(weights_gpu + headroom) / GiB:.2f}GiB", "cpu": f"{ram_bytes / GiB:.2f}GiB"}
    # JSON turns the GPU key 0 into the string "0", which Accelerate rejects: give the Python call as well
    python = (f"AutoModelForCausalLM.from_pretrained(path, device_map={device_map!r}, max_memory={max_memory!r}, "
              "offload_folder='offload')")
    return {"device_map": device_map, "max_memory": max_memory, "python": python, "notes": sorted(set(notes))}
