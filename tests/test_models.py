"""Exact model shapes: from presets, from a generated config.json, and from safetensors headers."""
import json

import numpy as np
import pytest
import safetensors.numpy

from hwmodels.units import InputError
from sim.model.formats import parse_format
from sim.model.resolve import load_model, model_presets, preset_config

# (total params, bytes per decoder layer in BF16 or FP16, from lab/data/reference/hardware-facts.md)
EXPECTED = {
    "llama-3.1-8b": (8.03e9, 436.2e6), "llama-3.1-70b": (70.55e9, 1.711e9), "llama-3.1-405b": (405.85e9, 6.375e9),
    "opt-175b": (174.6e9, 3.624e9), "mixtral-8x7b": (46.70e9, 2.90e9), "qwen3-235b-a22b": (235.09e9, 4.976e9),
}


def block_bytes(shape, block):
    return sum(u.nbytes for u in shape.units if u.block == block)


def test_qwen3_14b_exact_counts():
    m = load_model("qwen3-14b")
    assert m.total_params == 14_768_307_200
    assert m.total_bytes == 29_536_614_400
    assert {u.nbytes for u in m.units if u.kind == "decoder"} == {660_623_872}
    assert sum(1 for u in m.units if u.kind == "decoder") == 40


def test_qwen3_14b_from_generated_config_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(preset_config("qwen3-14b")))
    m = load_model(str(path))
    assert m.total_params == 14_768_307_200 and m.total_bytes == 29_536_614_400


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_presets_match_published_counts(name):
    params, layer_bytes = EXPECTED[name]
    m = load_model(name)
    assert abs(m.total_params / params - 1) < 1e-3
    blk = block_bytes(m, 5)
    assert abs(blk / layer_bytes - 1) < 1e-3


def test_deepseek_r1_units():
    m = load_model("deepseek-r1", parse_format("bf16"))
    assert abs(m.total_params / 671e9 - 1) < 1e-3
    assert abs(m.active_params() / 37.55e9 - 1) < 1e-3
    experts = [u for u in m.units if u.kind == "expert"]
    assert len(experts) == 58 * 256 and experts[0].params == 44_040_192
    assert m.unit("model.layers.0").params == 583_483_392  # dense layer
    assert m.unit("model.layers.3").params == 187_121_664 + 256 * 7168 + 256  # attention + router
    assert block_bytes(m, 3) // 2 == 11_507_286_272
    assert len([u for u in m.units if u.kind == "shared-expert"]) == 58


def test_deepseek_native_format_is_fp8():
    m = load_model("deepseek-r1")
    assert m.weight_format.name == "fp8"
    e = next(u for u in m.units if u.kind == "expert")
    # one byte per weight plus an fp32 scale per 128x128 block (weight_block_size): 3 x 16 x 56 x 4 = 10,752 bytes
    assert e.nbytes == 44_040_192 + 10_752


def test_four_bit_format_bytes():
    m = load_model("llama-3.1-8b", parse_format("q4_k_m"))
    layer = m.unit("model.layers.0")
    assert layer.nbytes == int(np.ceil(layer.matrix_params * 4.5 / 8)) + 2 * layer.small_params


def test_mixtral_activity():
    m = load_model("mixtral-8x7b")
    assert abs(m.active_params() / 12.88e9 - 1) < 1e-3
    assert m.n_routed_experts == 8 and m.experts_per_token == 2


def test_kv_bytes_per_token():
    # Qwen3-14B: 40 layers x 2 (K,V) x 8 kv heads x 128 x 2 bytes
    assert load_model("qwen3-14b").kv_bytes_per_token == 40 * 2 * 8 * 128 * 2
    # DeepSeek MLA: (512 + 64) x 2 bytes per layer
    assert load_model("deepseek-r1").kv_bytes_per_token == 61 * 576 * 2


def test_flops_hand_worked():
    u = load_model("llama-3.1-8b").unit("model.layers.0")
    # decode of batch 2 at context 100: 2 * params * 2 tokens + 4*32*128 per context token * 2 seqs * (100 + 1)
    assert u.flops(2, 1, 100) == 2 * u.matrix_params * 2 + 4 * 32 * 128 * 2 * 101


def test_checkpoint_headers_exact(tmp_path):
    cfg = dict(preset_config("llama-3.1-8b"), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    tensors = {"model.embed_tokens.weight": np.zeros((100, 64), np.float16), "lm_head.weight": np.zeros((100, 64), np.float16),
               "model.norm.weight": np.zeros(64, np.float32)}
    for i in range(2):
        tensors[f"model.layers.{i}.mlp.up_proj.weight"] = np.zeros((128, 64), np.float16)
        tensors[f"model.layers.{i}.input_layernorm.weight"] = np.zeros(64, np.float32)
    safetensors.numpy.save_file(tensors, str(tmp_path / "model.safetensors"))
    m = load_model(str(tmp_path))
    assert m.unit("model.layers.0").nbytes == 128 * 64 * 2 + 64 * 4
    assert m.unit("lm_head").nbytes == 100 * 64 * 2 + 64 * 4
    assert m.total_bytes == sum(a.nbytes for a in tensors.values())


def test_folder_without_safetensors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(preset_config("qwen3-14b")))
    with pytest.raises(InputError, match="no \\*.safetensors"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("cfg, match", [
    ({"model_type": "gpt2"}, "field 'num_hidden_layers' \\(or 'n_layer'\\) is missing for model_type 'gpt2'"),
    ({"model_type": "no-such-model"}, "model_type 'no-such-model' is not supported"),
    ({"model_type": "llama", "hidden_size": 64}, "field 'num_hidden_layers' is missing"),
    ({"model_type": "llama", "hidden_size": -4, "num_hidden_layers": 2}, "field 'hidden_size' is -4"),
])
def test_bad_configs(tmp_path, cfg, match):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=match):
        load_model(str(path))


def test_malformed_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_model(str(path))


def test_all_presets_load():
    for name in model_presets():
        assert load_model(name).total_bytes > 0
