"""The exported device_map loads in transformers: tiny random Mixtral, Qwen3-MoE and DeepSeek-V3 checkpoints, a plan
that puts a layer's experts on disk apart from the layer (and the reverse), exported, loaded with
from_pretrained(device_map=..., offload_folder=...) on the CPU and disk, and run forward. The rule the export
follows (sim/engines/accelerate/device_map.py) on hand-written maps of a run with a GPU."""
import pytest

from sim.engines.accelerate.device_map import keep_together, split_runs
from sim.engines.common import make_plan
from sim.model.families import shape_from_config
from sim.plan import Workload

TINY = {
    "mixtral": dict(model_type="mixtral", hidden_size=32, intermediate_size=16, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                    vocab_size=64),
    "qwen3_moe": dict(model_type="qwen3_moe", hidden_size=32, intermediate_size=32, moe_intermediate_size=16,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4,
                      num_experts_per_tok=2, vocab_size=64),
    "deepseek_v3": dict(model_type="deepseek_v3", hidden_size=32, intermediate_size=32, moe_intermediate_size=16,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
                        num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=16,
                        kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, n_group=1,
                        topk_group=1, vocab_size=64),
}


def test_a_module_apart_from_its_layer_only_where_accelerate_runs_it():
    """Measured on an H200 (tiny Mixtral, every pair of devices): only experts in RAM beside a layer on the GPU or on
    disk load; on a run without a GPU no split loads."""
    assert split_runs(0, "cpu", True) and split_runs("disk", "cpu", True)
    assert not any(split_runs(o, i, True) for o, i in ((0, "disk"), ("cpu", 0), ("cpu", "disk"), ("disk", 0)))
    assert not split_runs("cpu", "disk", False) and not split_runs("disk", "cpu", False)
    dm = {"model.layers.0": 0, "model.layers.0.mlp.experts": "cpu", "model.layers.1": 0,
          "model.layers.1.mlp.experts": "disk", "model.layers.2": "cpu", "model.layers.2.mlp.experts": 0,
          "model.layers.3": "disk", "model.layers.3.mlp.experts": "cpu", "model.layers.3.mlp.shared_experts": 0}
    assert keep_together(dm) == ["model.layers.1", "model.layers.2", "model.layers.3"]
    assert dm == {"model.layers.0": 0, "model.layers.0.mlp.experts": "cpu", "model.layers.1": "disk",
                  "model.layers.1.mlp.experts": "disk", "model.layers.2": "cpu", "model.layers.2.mlp.experts": "cpu",
                  "model.layers.3": "disk", "model.layers.3.mlp.experts": "cpu",
                  "model.layers.3.mlp.shared_experts": "disk"}


@pytest.mark.parametrize("family", sorted(TINY))
def test_exported_map_of_experts_on_disk_apart_from_their_layer_loads_and_runs(family, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from hwmodels import get_machine
    from sim.engines.accelerate.export import to_accelerate

    torch.manual_seed(0)
    cfg = TINY[family]
    conf = transformers.AutoConfig.for_model(**cfg)
    transformers.AutoModelForCausalLM.from_config(conf).save_pretrained(tmp_path / "ckpt")
    shape = shape_from_config(dict(cfg, torch_dtype="float32"))
    last = shape.n_blocks - 1  # DeepSeek's first block is dense: the last holds experts in every family
    # the last block's layer in RAM, its experts (and shared experts) on disk; the rest in RAM
    tiers = {u.name: "disk_raw" if u.block == last and u.kind in ("expert", "shared-expert") else "ram_pageable"
             for u in shape.units}
    plan = make_plan(shape, get_machine("h200-testbox"), "x", tiers, {n: "cpu" for n in tiers})
    out = to_accelerate(shape, plan, Workload(), 2**30, 2**30)
    dm = out["device_map"]
    assert dm[f"model.layers.{last}"] == dm[f"model.layers.{last}.mlp.experts"] == "disk"  # kept together, farther
    assert any("decoder layer" in n for n in out["notes"])
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt", device_map=dm,
                                                              offload_folder=str(tmp_path / "offload"))
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, cfg["vocab_size"]) and bool(torch.isfinite(logits).all())
