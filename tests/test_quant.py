"""quantization_config -> bits per weight (scales and zeros included), hand-worked on Llama-3-8B's shapes."""
import pytest

from hwmodels.units import InputError
from sim.model.families import shape_from_config
from sim.model.quant import bnb_4bit_bits, format_from_quant, grouped_int_bits

LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "torch_dtype": "bfloat16"}
LAYER_MATRIX = 4096 * (32 + 16) * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336   # 218,103,808 weights
LAYER_SMALL_BYTES = 2 * 4096 * 2                                               # two RMSNorms, 16-bit
EMBED_BF16 = 128256 * 4096 * 2                                                 # 1,050,673,152


def _layer(q):
    shape = shape_from_config({**LLAMA3_8B, "quantization_config": q})
    return shape, shape.unit("model.layers.0")


def test_gptq_4bit_group128_counts_scales_and_zeros():
    assert grouped_int_bits(4, 128) == 4 + 20 / 128 == 4.15625
    shape, layer = _layer({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True})
    assert layer.nbytes == LAYER_MATRIX * 4.15625 / 8 + LAYER_SMALL_BYTES == 113_311_744 + 16_384
    assert shape.units[0].nbytes == EMBED_BF16                          # embeddings stay 16-bit
    assert shape.unit("lm_head").nbytes == EMBED_BF16 + 4096 * 2
    assert shape.weight_format.name == "gptq-int4-g128"


def test_awq_reads_its_own_field_names():
    _, layer = _layer({"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "zero_point": True})
    assert layer.nbytes == LAYER_MATRIX * (4 + 20 / 64) / 8 + LAYER_SMALL_BYTES


def test_bnb_nf4_double_quant_and_int8():
    assert bnb_4bit_bits(True) == 4 + 8 / 64 + 32 / (64 * 256) == 4.126953125
    assert bnb_4bit_bits(False) == 4.5
    _, layer = _layer({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                       "bnb_4bit_use_double_quant": True})
    assert layer.nbytes == 112_513_024 + LAYER_SMALL_BYTES
    _, layer8 = _layer({"quant_method": "bitsandbytes", "load_in_8bit": True})
    assert layer8.nbytes == LAYER_MATRIX + LAYER_SMALL_BYTES


def test_fp8_block_scales_and_mxfp4():
    assert format_from_quant({"quant_method": "fp8", "weight_block_size": [128, 128]}).bits_per_weight == 8 + 32 / 16384
    assert format_from_quant({"quant_method": "fp8"}).bits_per_weight == 8.0
    assert format_from_quant({"quant_method": "mxfp4"}).bits_per_weight == 4.25


def test_a_4bit_checkpoint_is_not_read_as_bf16():
    bf16 = shape_from_config(dict(LLAMA3_8B)).total_bytes
    q4 = shape_from_config({**LLAMA3_8B, "quantization_config": {"quant_method": "awq", "bits": 4,
                                                                  "group_size": 128}}).total_bytes
    assert 0.3 < q4 / bf16 < 0.4      # ~5.7 GB of ~16 GB: the 16-bit embedding and head keep it above 4/16


def test_compressed_tensors_int4_group():
    q = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {
        "num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}}}}
    assert format_from_quant(q).bits_per_weight == 4 + 16 / 128


@pytest.mark.parametrize("q", [{"quant_method": "hqq"}, {"quant_method": "gptq", "bits": "four"},
                               {"quant_method": "bitsandbytes"}, {"quant_method": "gptq", "bits": 99}])
def test_bad_quantization_config_is_one_sentence(q):
    with pytest.raises(InputError) as exc:
        shape_from_config({**LLAMA3_8B, "quantization_config": q})
    assert "\n" not in str(exc.value)


def test_qwen3_moe_with_transformers5_num_local_experts():
    cfg = {"model_type": "qwen3_moe", "hidden_size": 256, "moe_intermediate_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000,
           "num_local_experts": 8, "num_experts_per_tok": 2}
    shape = shape_from_config(cfg)
    assert shape.n_routed_experts == 8 and sum(u.kind == "expert" for u in shape.units) == 16
    assert shape.unit("model.layers.0.mlp.experts.0").nbytes == 3 * 256 * 64 * 2
