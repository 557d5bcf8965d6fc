"""A plan as the device_map transformers can load: module names of current transformers, a block's routed experts as
its one fused module, and a module mapped apart from the module that holds it only where Accelerate's hooks can run
that.

transformers 5 fuses a block's routed experts into one module (`model.layers.{i}.mlp.experts`, whose `gate_up_proj`
and `down_proj` hold every expert: modeling_mixtral.py, modeling_qwen3_moe.py, modeling_deepseek_v3.py), and its
`_no_split_modules` (the decoder layer) is the unit its own "auto" map never splits. A map may still give the experts
a device of their own, but Accelerate's dispatch (accelerate/hooks.py, attach_align_device_hook_on_blocks) hooks the
layer first: a layer on the execution device places every tensor under it, a layer offloaded turns every tensor
under it into a meta tensor read back from its weights map. Loading a tiny Mixtral with each split (transformers
5.17 and 5.24, accelerate 1.15 and 1.16; tests/test_accelerate_load.py) ran only two: on a run with a GPU, the
layer on the GPU or on disk with its experts in RAM ('cpu'); every other split (experts on disk apart from their
layer, experts on the GPU apart from it, any split of a run on the CPU alone) fails in from_pretrained with
"gate_up_proj is on the meta device".
"""
from __future__ import annotations

from sim.costs.tiers import tier_row
from sim.model.shapes import ModelShape
from sim.plan import Plan

# Module names transformers 5 gives differently from the checkpoint's tensor names (its modeling_*.py; checkpoints
# keep the old names and are converted at load): Mixtral's sparse MoE block is `mlp`.
TRANSFORMERS5_RENAMES = {"mixtral": ((".block_sparse_moe", ".mlp"),)}
# a device_map value by how far it is from the GPU: a block that cannot be split goes to the farther of its devices
DISTANCE = {0: 0, "cpu": 1, "disk": 2}


def hf_module(model: ModelShape, name: str) -> str:
    """The module of current transformers that holds the tensors under checkpoint prefix `name`."""
    for old, new in TRANSFORMERS5_RENAMES.get(model.family, ()):
        name = name.replace(old, new)
    return name


def device_of(tier: str):
    """The device_map value of a tier: 0 (the GPU), 'cpu' (RAM, pageable) or 'disk' (the offload folder)."""
    row = tier_row(tier)
    return 0 if row.resident else "disk" if row.reads_storage else "cpu"


def split_runs(outer, inner, gpu_run: bool) -> bool:
    """Whether Accelerate's hooks run a module on `inner` inside one on `outer` (the module docstring)."""
    return outer == inner or (gpu_run and inner == "cpu" and outer in (0, "disk"))


def plan_device_map(model: ModelShape, plan: Plan) -> tuple[dict, list[str]]:
    """The device_map that runs `plan` in transformers, and one sentence per change it had to make."""
    return tiers_device_map(model, {p.unit: p.tier for p in plan.placements})


def loadable_tiers(model: ModelShape, tiers: dict[str, str]) -> dict[str, str]:
    """The units' tiers as the device_map of `tiers` places them: a unit the map moves to another device takes that
    device's tier (vram, ram_pageable, disk_raw)."""
    device_map, _ = tiers_device_map(model, tiers)
    tier = {0: "vram", "cpu": "ram_pageable", "disk": "disk_raw"}
    out = {}
    for u in model.units:
        module = hf_module(model, u.modules[-1] if u.kind == "lm_head" else u.modules[0])
        if u.kind == "expert":
            module = module.rsplit(".", 1)[0]
        dev = device_map[module]
        out[u.name] = tiers[u.name] if device_of(tiers[u.name]) == dev else tier[dev]
    return out


def tiers_device_map(model: ModelShape, tiers: dict[str, str]) -> tuple[dict, list[str]]:
    """The device_map of units stored in `tiers` (unit -> tier), and one sentence per change it had to make."""
    device_map, fused, notes = {}, {}, []
    for u in model.units:
        dev = device_of(tiers[u.name])
        if u.kind == "expert":  # transformers 5 fuses a block's experts into one module: map that module
            fused.setdefault(hf_module(model, u.modules[0]).rsplit(".", 1)[0], []).append(dev)
            continue
        for module in u.modules:
            device_map[hf_module(model, module)] = dev
    for module, devs in fused.items():
        device_map[module] = max(set(devs), key=lambda d: (devs.count(d), d == 0))
        if len(set(devs)) > 1:
            notes.append("transformers fuses a block's experts into one module: each block's experts go where most "
                         "of them are.")
    head = next((u for u in model.units if u.kind == "lm_head" and u.tied_nbytes), None)
    emb = next((u for u in model.units if u.kind == "embedding"), None)
    if head is not None and emb is not None:  # one matrix: transformers wants both modules on one device
        head_key, emb_key = hf_module(model, head.modules[-1]), hf_module(model, emb.modules[0])
        if device_map[head_key] != device_map[emb_key]:
            device_map[head_key] = device_map[emb_key]
            notes.append("the head shares the embedding's matrix (tied): it goes where the embedding goes.")
    moved = keep_together(device_map)
    if moved:
        notes.append(f"Accelerate cannot load {len(moved)} module(s) apart from their decoder layer as planned (only "
                     "experts in RAM beside a layer on the GPU or on disk load): those layers go whole to the farther "
                     f"of their two devices ({', '.join(moved[:3])}{', ...' if len(moved) > 3 else ''}).")
    return device_map, notes


def keep_together(device_map: dict) -> list[str]:
    """Put every module that `split_runs` cannot run apart from the module holding it with that module, both on the
    farther of their two devices (never more on the GPU than planned); changes `device_map` in place and returns
    the holding modules it changed."""
    moved: list[str] = []
    changed = True
    while changed:
        changed = False
        gpu_run = 0 in device_map.values()
        for key in sorted(device_map, key=lambda k: (k.count("."), k)):
            outer = _holder(device_map, key)
            if outer is None or split_runs(device_map[outer], device_map[key], gpu_run):
                continue
            far = max(device_map[outer], device_map[key], key=DISTANCE.__getitem__)
            device_map[outer] = device_map[key] = far
            moved.append(outer)
            changed = True
            break
    return sorted(set(moved), key=lambda k: (len(k), k))


def _holder(device_map: dict, key: str) -> str | None:
    """The longest other key of the map that holds `key` (a module prefix of it)."""
    outer = [k for k in device_map if k != key and key.startswith(k + ".")]
    return max(outer, key=len) if outer else None
