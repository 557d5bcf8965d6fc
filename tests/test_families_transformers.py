"""The hand-written family tables (sim/model/families.py) against transformers' own models: every preset's
config, cut to two blocks, built on the meta device (no memory, no hub); the parameters and persistent buffers of
each block, the embedding and the head must add up to the units' parameters exactly. This is where a layout change
in transformers (e.g. fused experts) shows up."""
import collections

import pytest

from sim.model.families import shape_from_config
from sim.model.resolve import preset_config

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
    from sim.engines.accelerate.export import to_accelerate
    from sim.plan import Workload
    from sim.engines.common import make_plan
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


@pytest.mark.parametrize("preset, extra", CASES)
def test_layout_read_from_transformers_equals_the_table(preset, extra):
    """The fallback for families without a table (sim/model/from_hf.py) gives, on every family that has one, the same
    units: kind, block, expert, parameters, bytes and FLOP parameters (names may differ: checkpoint vs module)."""
    from sim.model.families import default_format
    from sim.model.from_hf import shape_from_transformers
    cfg = dict(preset_config(preset), num_hidden_layers=2, **extra)
    cfg.pop("quantization_config", None)
    table = shape_from_config(cfg)
    read = shape_from_transformers(cfg, default_format(cfg), "test")

    def key(s):
        return sorted((u.kind, u.block, -1 if u.expert is None else u.expert, u.params, u.nbytes, u.flop_params)
                      for u in s.units)
    assert key(read) == key(table)
    assert (read.n_routed_experts, read.experts_per_token) == (table.n_routed_experts, table.experts_per_token)
    if "kv_lora_rank" not in cfg:  # grouped-query attention: the same per-token attention terms
        assert {(u.attn_flops_per_ctx_token, u.kv_bytes_per_token) for u in read.units if u.kind in ("decoder", "attention")} \
            == {(u.attn_flops_per_ctx_token, u.kv_bytes_per_token) for u in table.units if u.kind in ("decoder", "attention")}


def test_a_family_without_a_table_is_read_from_transformers():
    """gpt-oss (no hand table): routed experts split from transformers' fused weights, one unit per expert."""
    cfg = transformers.AutoConfig.for_model("gpt_oss", num_hidden_layers=2, layer_types=["sliding_attention",
                                                                                       "full_attention"]).to_dict()
    shape = shape_from_config(cfg)
    n_exp = cfg["num_local_experts"]
    assert shape.family == "gpt_oss" and shape.n_routed_experts == n_exp
    assert sum(u.kind == "expert" for u in shape.units) == 2 * n_exp
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    expert = next(u for u in shape.units if u.kind == "expert")
    assert expert.matrix_params == 3 * h * inter  # gate_up (2 x inter x h) and down (h x inter) per expert
    assert expert.small_params == 2 * inter + h    # their biases
    assert sum(u.params for u in shape.units) == sum(_hf_counts(cfg).values())


PLACEMENT_CASES = [("llama-3.1-8b", {"num_hidden_layers": 6}),
                   ("llama-3.1-8b", {"num_hidden_layers": 6, "hidden_size": 2048, "intermediate_size": 8192,
                                     "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
                                     "tie_word_embeddings": True}),
                   ("qwen3-14b", {"num_hidden_layers": 5, "vocab_size": 32000}),
                   ("qwen3-235b-a22b", {"num_hidden_layers": 3})]


@pytest.mark.parametrize("preset, extra", PLACEMENT_CASES)
def test_accelerate_placement_equals_transformers_device_map(preset, extra):
    """sim.engines.placements.accelerate_tiers against transformers' own infer_auto_device_map (what from_pretrained with
    device_map="auto" and one GPU runs) on the meta model, over a grid of GPU and RAM budgets: every unit lands where
    transformers puts it, a head tied to the embedding (placed with it) and an MoE's fused experts included."""
    from transformers.integrations.accelerate import infer_auto_device_map
    from sim.engines.accelerate.export import tiers_from_device_map
    from sim.plan import Budgets
    from sim.engines.accelerate.placement import accelerate_tiers
    cfg = dict(preset_config(preset), **extra)
    cfg.pop("quantization_config", None)
    shape = shape_from_config(cfg)
    conf = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(conf, dtype=torch.bfloat16)
    total, checked = shape.total_bytes, set()
    for gpu in (0.03, 0.1, 0.22, 0.35, 0.5, 0.64, 0.8, 0.97, 1.2):
        for ram in (0.05, 0.2, 0.45, 0.7, 3.0):
            vram, rambytes = int(gpu * total), int(ram * total)
            hf = infer_auto_device_map(model, max_memory={0: vram, "cpu": rambytes},
                                       no_split_module_classes=model._no_split_modules)
            want = tiers_from_device_map(shape, {k: str(v) for k, v in hf.items()})
            assert accelerate_tiers(shape, Budgets(vram_bytes=vram, ram_bytes=rambytes, pinned_bytes=0)) == want, \
                (gpu, ram, dict(hf))
            checked.add(tuple(sorted(set(want.values()))))
    assert len(checked) >= 4  # the grid reached maps of every kind: all GPU, GPU and RAM, RAM and disk, ...
