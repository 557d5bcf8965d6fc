"""The hand-written family tables (sim/families.py) against transformers' own models (issue 14): every preset's
config, cut to two blocks, built on the meta device (no memory, no hub); the parameters and persistent buffers of
each block, the embedding and the head must add up to the units' parameters exactly. This is where a layout change
in transformers (e.g. fused experts) shows up."""
import collections

import pytest

from sim.families import shape_from_config
from sim.models import preset_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CASES = [("llama-3.1-8b", {}), ("qwen3-14b", {}), ("mixtral-8x7b", {}), ("qwen3-235b-a22b", {}),
         ("deepseek-r1", {"first_k_dense_replace": 1}), ("opt-175b", {})]


def _hf_counts(cfg: dict) -> collections.Counter:
    conf = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(conf)
    out: collections.Counter = collections.Counter()
    params = dict(model.named_parameters())  # a tied weight once
    all_params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    buffers = {n: t for n, t in model.state_dict().items() if n not in all_params}  # persistent buffers
    for name, t in {**params, **buffers}.items():  # what a checkpoint stores
        parts = name.split(".")
        i = parts.index("layers") if "layers" in parts else -1
        out[f"block{parts[i + 1]}" if i >= 0 else "ends"] += t.numel()
    return out


@pytest.mark.parametrize("preset, extra", CASES)
def test_units_add_up_to_transformers_model(preset, extra):
    cfg = dict(preset_config(preset), num_hidden_layers=2, **extra)
    cfg.pop("quantization_config", None)  # counts, not formats
    shape = shape_from_config(cfg)
    ours: collections.Counter = collections.Counter()
    for u in shape.units:
        ours[f"block{u.block}" if 0 <= u.block < shape.n_blocks else "ends"] += u.params
    assert ours == _hf_counts(cfg)


@pytest.mark.parametrize("preset, extra", CASES)
def test_accelerate_export_names_real_modules(preset, extra):
    """Every key of the exported device_map names a module of current transformers' model (a block's routed experts:
    its fused experts module, whose weights hold one slice per expert)."""
    from hwmodels import get_machine
    from planner.export import to_accelerate
    from sim.plan import Workload
    from sim.policies import make_plan
    cfg = dict(preset_config(preset), num_hidden_layers=2, **extra)
    cfg.pop("quantization_config", None)
    shape = shape_from_config(cfg)
    conf = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    with torch.device("meta"):
        modules = dict(transformers.AutoModelForCausalLM.from_config(conf).named_modules())
    plan = make_plan(shape, get_machine("h200-testbox"), "x",
                     {u.name: "ram_pageable" if u.block % 2 else "vram" for u in shape.units})
    for key in to_accelerate(shape, plan, Workload(), 2**40, 2**40)["device_map"]:
        assert key in modules, key
        if key.endswith(".experts"):
            assert all(p.shape[0] == shape.n_routed_experts for p in modules[key].parameters(recurse=False)), key
