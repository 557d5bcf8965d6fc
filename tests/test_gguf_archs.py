"""GGUF architectures mapped to the family builders, on tiny files written here: the units, and every tensor's bytes
in exactly one unit, hand-worked (16-bit matrices: 2 bytes a value, 32-bit norms and routers: 4)."""
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from hwmodels.units import InputError  # noqa: E402
from sim.model.gguf_header import read_header  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402

H, HEADS, KV_HEADS, D, FF, VOCAB, EXPERTS, EXP_FF = 64, 4, 2, 16, 128, 256, 4, 32
GQA_BYTES = 2 * (H * H + 2 * (KV_HEADS * D) * H + H * H) + 2 * 4 * H   # q, k, v, o at 16 bits; two norms: 25088


def f16(*shape):
    return np.zeros(shape, dtype=np.float16)


def f32(*shape):
    return np.zeros(shape, dtype=np.float32)


def write(path, arch, meta: dict, tensors: dict, tied=False):
    """A GGUF of `arch` with `meta` (GGUFWriter method suffix -> value) and the common embedding/head tensors."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(meta.pop("block_count", 1))
    w.add_embedding_length(H)
    w.add_head_count(HEADS)
    for method, value in meta.items():
        getattr(w, f"add_{method}")(value)
    w.add_tensor("token_embd.weight", f16(VOCAB, H))                              # 32768
    w.add_tensor("output_norm.weight", f32(H))                                    # 256
    if not tied:
        w.add_tensor("output.weight", f16(VOCAB, H))                              # 32768
    for name, array in tensors.items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gqa(i=0, qk_norm=False, bias=False) -> dict:
    t = {f"blk.{i}.attn_norm.weight": f32(H), f"blk.{i}.ffn_norm.weight": f32(H),
         f"blk.{i}.attn_q.weight": f16(H, H), f"blk.{i}.attn_k.weight": f16(KV_HEADS * D, H),
         f"blk.{i}.attn_v.weight": f16(KV_HEADS * D, H), f"blk.{i}.attn_output.weight": f16(H, H)}
    if qk_norm:
        t |= {f"blk.{i}.attn_q_norm.weight": f32(D), f"blk.{i}.attn_k_norm.weight": f32(D)}   # 64 each
    if bias:
        t |= {f"blk.{i}.attn_q.bias": f32(H), f"blk.{i}.attn_k.bias": f32(32), f"blk.{i}.attn_v.bias": f32(32)}
    return t


def mlp(i=0) -> dict:
    return {f"blk.{i}.ffn_gate.weight": f16(FF, H), f"blk.{i}.ffn_up.weight": f16(FF, H),
            f"blk.{i}.ffn_down.weight": f16(H, FF)}                                # 16384 each


def fused_experts(i=0) -> dict:
    return {f"blk.{i}.ffn_gate_inp.weight": f32(EXPERTS, H), f"blk.{i}.ffn_gate_exps.weight": f16(EXPERTS, EXP_FF, H),
            f"blk.{i}.ffn_up_exps.weight": f16(EXPERTS, EXP_FF, H),
            f"blk.{i}.ffn_down_exps.weight": f16(EXPERTS, H, EXP_FF)}              # 1024, then 16384 each


MOE_META = {"head_count_kv": KV_HEADS, "expert_count": EXPERTS, "expert_used_count": 2,
            "expert_feed_forward_length": EXP_FF}
EXPERT_BYTES = 3 * 2 * EXP_FF * H                                                  # 12288: a quarter of each fused tensor


def _every_byte_once(path, m) -> None:
    _, tensors = read_header(path)
    assert sum(u.nbytes - u.tied_nbytes for u in m.units) == sum(t[1] for t in tensors.values())


@pytest.mark.parametrize("arch,family,qk_norm", [("gemma2", "llama", False), ("gemma3", "qwen3", True)])
def test_gemma_is_a_dense_family_with_a_tied_head(tmp_path, arch, family, qk_norm):
    t = gqa(qk_norm=qk_norm) | mlp() | {"blk.0.post_attention_norm.weight": f32(H), "blk.0.post_ffw_norm.weight": f32(H)}
    path = write(tmp_path / "g.gguf", arch, {"head_count_kv": KV_HEADS, "key_length": D, "value_length": D,
                                             "feed_forward_length": FF}, t, tied=True)
    m = load_model(str(path))
    assert m.family == family and [u.kind for u in m.units] == ["embedding", "decoder", "lm_head"]
    assert m.units[1].nbytes == GQA_BYTES + 3 * 16384 + 2 * 256 + (128 if qk_norm else 0)
    assert m.units[2].tied_nbytes == 32768 and m.units[2].nbytes == 256 + 32768
    assert m.units[1].kv_bytes_per_token == 2 * KV_HEADS * D * 2
    _every_byte_once(path, m)


def test_phi3_fused_qkv_and_gate_up_are_its_decoder(tmp_path):
    t = {"blk.0.attn_norm.weight": f32(H), "blk.0.ffn_norm.weight": f32(H), "blk.0.attn_qkv.weight": f16(H + 64, H),
         "blk.0.attn_output.weight": f16(H, H), "blk.0.ffn_up.weight": f16(2 * FF, H), "blk.0.ffn_down.weight": f16(H, FF)}
    path = write(tmp_path / "p.gguf", "phi3", {"head_count_kv": KV_HEADS, "feed_forward_length": FF}, t)
    m = load_model(str(path))
    assert m.family == "llama" and m.units[1].nbytes == 512 + 16384 + 8192 + 32768 + 16384
    assert m.units[1].matrix_params == (H * H + 2 * 32 * H + H * H) + 3 * H * FF  # the builder's, as the tensors'
    _every_byte_once(path, m)


@pytest.mark.parametrize("arch,family,bias", [("olmoe", "qwen3_moe", False), ("gpt-oss", "qwen2_moe", True),
                                              ("qwen3moe", "qwen3_moe", False)])
def test_moe_architectures_split_their_fused_experts(tmp_path, arch, family, bias):
    t = gqa(qk_norm=not bias, bias=bias) | fused_experts()
    path = write(tmp_path / "m.gguf", arch, dict(MOE_META), t)
    m = load_model(str(path))
    assert m.family == family and m.n_routed_experts == EXPERTS and m.experts_per_token == 2
    assert [u.nbytes for u in m.units if u.kind == "expert"] == [EXPERT_BYTES] * EXPERTS
    attention = next(u for u in m.units if u.kind == "attention")
    assert attention.nbytes == GQA_BYTES + 1024 + (128 if not bias else 4 * (64 + 32 + 32))
    _every_byte_once(path, m)


def test_qwen2moe_shared_expert_gets_a_unit_of_its_tensors(tmp_path):
    shared = {"blk.0.ffn_gate_inp_shexp.weight": f32(H), "blk.0.ffn_gate_shexp.weight": f16(H, H),
              "blk.0.ffn_up_shexp.weight": f16(H, H), "blk.0.ffn_down_shexp.weight": f16(H, H)}
    path = write(tmp_path / "q.gguf", "qwen2moe", dict(MOE_META), gqa(bias=True) | fused_experts() | shared)
    m = load_model(str(path))
    assert [u.kind for u in m.units] == ["embedding", "attention"] + ["expert"] * EXPERTS + ["shared-expert", "lm_head"]
    s = m.units[-2]
    assert s.nbytes == 256 + 3 * 8192 and s.matrix_params == H + 3 * H * H and s.max_tensor_nbytes == 8192
    _every_byte_once(path, m)


@pytest.mark.parametrize("fused", [True, False])
def test_llama_with_experts_is_mixtral_fused_or_per_expert(tmp_path, fused):
    experts = fused_experts() if fused else {"blk.0.ffn_gate_inp.weight": f32(EXPERTS, H)} | {
        f"blk.0.ffn_{p}.{e}.weight": f16(EXP_FF, H) for p in ("gate", "up", "down") for e in range(EXPERTS)}
    meta = dict(MOE_META, feed_forward_length=EXP_FF)
    del meta["expert_feed_forward_length"]
    path = write(tmp_path / "x.gguf", "llama", meta, gqa() | experts)
    m = load_model(str(path))
    assert m.family == "mixtral" and [u.nbytes for u in m.units if u.kind == "expert"] == [EXPERT_BYTES] * EXPERTS
    _every_byte_once(path, m)


def test_tensors_of_an_expert_beyond_the_count_are_refused_not_lost(tmp_path):
    experts = fused_experts() | {f"blk.0.ffn_{p}.{EXPERTS}.weight": f16(EXP_FF, H) for p in ("gate", "up", "down")}
    meta = dict(MOE_META, feed_forward_length=EXP_FF)
    path = write(tmp_path / "x.gguf", "llama", meta, gqa() | experts)
    with pytest.raises(InputError, match="12,288 bytes of the file's tensors belong to no unit"):
        load_model(str(path))


# DeepSeek-V2/V3 (MLA): q_lora 32, kv_lora 32, rope 8, nope 16, v 16; 4 heads; block 0 dense, block 1 4 experts + 1
MLA = {"attn_norm": f32(H), "ffn_norm": f32(H), "attn_q_a": f16(32, H), "attn_q_a_norm": f32(32),
       "attn_q_b": f16(HEADS * 24, 32), "attn_kv_a_mqa": f16(32 + 8, H), "attn_kv_a_norm": f32(32),
       "attn_kv_b": f16(HEADS * (16 + 16), 32), "attn_output": f16(H, HEADS * 16)}
MLA_BYTES = 256 + 256 + 4096 + 128 + 6144 + 5120 + 128 + 8192 + 8192              # 32512
MLA_MATRIX = 64 * 32 + 32 * HEADS * 24 + 64 * 40 + 32 * HEADS * 32 + HEADS * 16 * 64  # 15872


def _deepseek(path, mla_keys: bool, router_bias: bool):
    t = {f"blk.{i}.{k}.weight": v for i in range(2) for k, v in MLA.items()} | mlp(0) | fused_experts(1)
    t |= {"blk.1.ffn_gate_shexp.weight": f16(EXP_FF, H), "blk.1.ffn_up_shexp.weight": f16(EXP_FF, H),
          "blk.1.ffn_down_shexp.weight": f16(H, EXP_FF)}                            # 4096 each
    if router_bias:
        t["blk.1.exp_probs_b.bias"] = f32(EXPERTS)                                  # 16
    meta = {"block_count": 2, "feed_forward_length": FF, "q_lora_rank": 32, "kv_lora_rank": 32,
            "rope_dimension_count": 8, "leading_dense_block_count": 1, "expert_count": EXPERTS,
            "expert_used_count": 2, "expert_shared_count": 1, "expert_feed_forward_length": EXP_FF}
    if mla_keys:  # current converters: MLA as MQA over the latent, the per-head sizes in *_mla
        meta |= {"head_count_kv": 1, "key_length": 32 + 8, "value_length": 32, "key_length_mla": 24,
                 "value_length_mla": 16}
    else:
        meta |= {"head_count_kv": HEADS, "key_length": 24, "value_length": 16}
    return write(path, "deepseek2", meta, t)


@pytest.mark.parametrize("mla_keys", [True, False])
@pytest.mark.parametrize("router_bias", [True, False])
def test_deepseek2_units_and_bytes_by_hand(tmp_path, mla_keys, router_bias):
    path = _deepseek(tmp_path / "ds.gguf", mla_keys, router_bias)
    m = load_model(str(path))
    assert m.family == ("deepseek_v3" if router_bias else "deepseek_v2")
    assert [u.kind for u in m.units] == (["embedding", "decoder", "attention"] + ["expert"] * EXPERTS
                                         + ["shared-expert", "lm_head"])
    by = {u.name: u for u in m.units}
    assert by["model.layers.0"].nbytes == MLA_BYTES + 3 * 16384 == 81664
    assert by["model.layers.1"].nbytes == MLA_BYTES + 1024 + (16 if router_bias else 0)
    assert all(by[f"model.layers.1.mlp.experts.{e}"].nbytes == EXPERT_BYTES for e in range(EXPERTS))
    assert by["model.layers.1.mlp.shared_experts"].nbytes == 3 * 4096
    assert by["model.embed_tokens"].nbytes == 32768 and by["lm_head"].nbytes == 256 + 32768
    assert by["model.layers.1"].matrix_params == MLA_MATRIX                          # the builder's MLA, as written
    assert by["model.layers.1"].kv_bytes_per_token == (32 + 8) * 2                   # the latent and the rope key
    assert m.total_bytes == 32768 + 81664 + 32512 + 1024 + (16 if router_bias else 0) + 5 * 12288 + 33024
    _every_byte_once(path, m)


def test_deepseek2_with_a_key_shorter_than_its_rope_is_one_sentence(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "d.gguf"), "deepseek2")
    for method, value in {"block_count": 1, "embedding_length": H, "head_count": HEADS, "rope_dimension_count": 32,
                          "key_length_mla": 24, "value_length_mla": 16, "kv_lora_rank": 32}.items():
        getattr(w, f"add_{method}")(value)
    w.add_tensor("token_embd.weight", f16(VOCAB, H))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(InputError, match="'deepseek2.attention.key_length_mla' is 24, less than"):
        load_model(str(tmp_path / "d.gguf"))


def test_an_unmapped_architecture_lists_the_supported_ones(tmp_path):
    path = write(tmp_path / "s.gguf", "starcoder2", {"feed_forward_length": FF}, gqa() | mlp())
    with pytest.raises(InputError, match="'starcoder2' is not supported; supported: deepseek2, gemma2, gemma3"):
        load_model(str(path))
