"""GGUF files written in the test: exact bytes per tensor and per unit, hand-worked; bad files in one sentence."""
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from sim.engines import costs_of
from hwmodels.units import InputError  # noqa: E402
from offloadsim.cli import main  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402

Q8 = gguf.GGMLQuantizationType.Q8_0
H, FF, VOCAB, HEADS, KV = 64, 128, 256, 4, 2   # head_dim 16, K/V projections 32 rows


def _q8(rows, cols):
    return gguf.quants.quantize(np.ones((rows, cols), dtype=np.float32), Q8)


def _common(w, arch, blocks):
    w.add_block_count(blocks)
    w.add_embedding_length(H)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_context_length(2048)
    w.add_tensor("token_embd.weight", np.ones((VOCAB, H), dtype=np.float16))            # 32768 bytes
    w.add_tensor("output_norm.weight", np.ones(H, dtype=np.float32))                    # 256
    w.add_tensor("output.weight", _q8(VOCAB, H), raw_dtype=Q8)                          # 512 blocks x 34 = 17408


def _attention(w, i):
    w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(H, dtype=np.float32))             # 256
    w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(H, dtype=np.float32))              # 256
    w.add_tensor(f"blk.{i}.attn_q.weight", _q8(H, H), raw_dtype=Q8)                     # 128 blocks x 34 = 4352
    w.add_tensor(f"blk.{i}.attn_k.weight", _q8(32, H), raw_dtype=Q8)                    # 2176
    w.add_tensor(f"blk.{i}.attn_v.weight", _q8(32, H), raw_dtype=Q8)                    # 2176
    w.add_tensor(f"blk.{i}.attn_output.weight", _q8(H, H), raw_dtype=Q8)                # 4352


def write_llama(path):
    w = gguf.GGUFWriter(str(path), "llama")
    _common(w, "llama", 2)
    w.add_feed_forward_length(FF)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    for i in range(2):
        _attention(w, i)
        w.add_tensor(f"blk.{i}.ffn_gate.weight", _q8(FF, H), raw_dtype=Q8)             # 256 blocks x 34 = 8704
        w.add_tensor(f"blk.{i}.ffn_up.weight", _q8(FF, H), raw_dtype=Q8)               # 8704
        if i == 0:
            w.add_tensor("blk.0.ffn_down.weight", _q8(H, FF), raw_dtype=Q8)             # 8704
        else:
            w.add_tensor("blk.1.ffn_down.weight", np.ones((H, FF), dtype=np.float16))   # 16384
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_qwen3moe(path, experts=4, inter=32):
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    _common(w, "qwen3moe", 1)
    w.add_expert_count(experts)
    w.add_expert_used_count(2)
    w.add_expert_feed_forward_length(inter)
    w.add_feed_forward_length(inter)
    _attention(w, 0)
    w.add_tensor("blk.0.ffn_gate_inp.weight", np.ones((experts, H), dtype=np.float32))    # 1024
    for name in ("gate", "up"):                                                          # 4 x 32 x 64 = 8192 el
        w.add_tensor(f"blk.0.ffn_{name}_exps.weight", gguf.quants.quantize(
            np.ones((experts, inter, H), dtype=np.float32), Q8), raw_dtype=Q8)           # 256 blocks x 34 = 8704
    w.add_tensor("blk.0.ffn_down_exps.weight", np.ones((experts, H, inter), dtype=np.float16))  # 16384
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


ATTN = 256 + 256 + 4352 + 2176 + 2176 + 4352


def test_two_layers_give_their_exact_bytes(tmp_path):
    path = tmp_path / "tiny-q8.gguf"
    write_llama(path)
    m = load_model(str(path))
    by = {u.name: u for u in m.units}
    assert by["model.layers.0"].nbytes == ATTN + 3 * 8704 == 39680
    assert by["model.layers.1"].nbytes == ATTN + 2 * 8704 + 16384 == 47360
    assert by["model.embed_tokens"].nbytes == VOCAB * H * 2 == 32768
    assert by["lm_head"].nbytes == 256 + 17408 and by["lm_head"].tied_nbytes == 0
    assert m.total_bytes == 32768 + 39680 + 47360 + 17664
    assert m.family == "llama" and m.n_blocks == 2 and m.vocab == VOCAB and m.weight_format.name == "q8_0"
    assert by["model.layers.0"].kv_bytes_per_token == 2 * 32 * 2   # K and V, 32 values each, 16-bit cache
    # the largest tensor each (what llama.cpp's compute buffer copies at once): layer 1's 16-bit MLP matrix, layer
    # 0's Q8 ones, the output's Q8 17408, the embedding's 16-bit whole
    assert by["model.layers.1"].max_tensor_nbytes == 16384 and by["model.layers.0"].max_tensor_nbytes == 8704
    assert by["lm_head"].max_tensor_nbytes == 17408 and by["model.embed_tokens"].max_tensor_nbytes == 32768


def test_tied_head_reuses_the_embedding_bytes(tmp_path):
    path = tmp_path / "tied.gguf"
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_block_count(1)
    w.add_embedding_length(H)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_feed_forward_length(FF)
    w.add_tensor("token_embd.weight", np.ones((VOCAB, H), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.ones(H, dtype=np.float32))
    _attention(w, 0)
    for name in ("gate", "up", "down"):
        shape = (FF, H) if name != "down" else (H, FF)
        w.add_tensor(f"blk.0.ffn_{name}.weight", np.ones(shape, dtype=np.float16))      # 16384 each
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    m = load_model(str(path))
    head = m.units[-1]
    assert head.tied_nbytes == 32768 and head.nbytes == 256 + 32768
    assert m.units[1].nbytes == ATTN + 3 * 16384
    assert m.total_bytes == 32768 + ATTN + 3 * 16384 + 256


def test_fused_experts_split_evenly(tmp_path):
    path = tmp_path / "moe.gguf"
    write_qwen3moe(path)
    m = load_model(str(path))
    assert m.family == "qwen3_moe" and m.n_routed_experts == 4 and m.experts_per_token == 2
    experts = [u for u in m.units if u.kind == "expert"]
    assert len(experts) == 4 and all(u.nbytes == (8704 * 2 + 16384) // 4 == 8448 for u in experts)
    assert all(u.max_tensor_nbytes == 16384 // 4 for u in experts)  # its slice of the largest fused tensor
    attn = next(u for u in m.units if u.kind == "attention")
    assert attn.nbytes == ATTN + 1024


def test_plan_runs_on_a_gguf_file_with_machine_flags(tmp_path, capsys):
    path = tmp_path / "tiny-q8.gguf"
    write_llama(path)
    assert main(["plan", str(path), "--gpu", "rtx4070", "--ram", "64GiB", "--storage", "nvme-gen4", "--vram",
                 "10GiB", "--new-tokens", "2", "--time-budget", "1"]) == 0
    assert "tiny" in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"", b"GGUF", b"GGUF\x03\x00\x00\x00" + b"\xff" * 40, b"not a gguf at all\n",
                                     "ünïcode".encode() * 10])
def test_bad_gguf_is_one_sentence(tmp_path, capsys, content):
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(InputError):
        load_model(str(path))
    assert main(["info", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_truncated_gguf_is_one_sentence(tmp_path, capsys):
    path = tmp_path / "cut.gguf"
    write_llama(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert main(["info", str(path)]) == 2
    assert "gguf" in capsys.readouterr().err.lower()


def test_dtype_with_a_gguf_is_refused(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_llama(path)
    with pytest.raises(InputError, match="drop --dtype"):
        from sim.model.formats import parse_format
        load_model(str(path), parse_format("bf16"))


def test_calibrate_peer_reads_the_gguf_llama_bench_ran(tmp_path, capsys):
    """calibrate-peer MODEL.gguf: the shape comes from the GGUF's own tensors; records timed 1.25x as fast as the
    preset prices that shape at -ngl 0 give a factor of 1.25, written to the profile."""
    import json
    from hwmodels.presets import load_machine
    from sim.engines.llamacpp.bench import run_of
    from sim.engines.llamacpp.fitting import host_scaled
    from validate.peer_calibration import predict, with_peer
    path = tmp_path / "m.gguf"
    write_llama(path)
    shape = load_model(str(path))
    m = load_machine("h200-testbox")
    truth = with_peer(m, "llamacpp", host_scaled(costs_of(m, "llamacpp"), 1.25))
    rec = {"n_prompt": 0, "n_gen": 16, "n_gpu_layers": 0, "avg_ns": 1.0}
    t = predict(shape, truth, run_of(rec, shape, truth, None, ""))["time_per_token_s"]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps([dict(rec, avg_ns=t * 16e9)]))
    out = tmp_path / "p.json"
    assert main(["calibrate-peer", str(path), "--bench", str(bench), "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_cpu_scale"] == pytest.approx(1.25, rel=1e-3)
    assert costs_of(load_machine(str(out)), "llamacpp").cpu_bytes_per_s == pytest.approx(
        1.25 * costs_of(m, "llamacpp").cpu_bytes_per_s, rel=1e-3)


def test_calibrate_peer_prices_each_record_with_its_own_flash_attention(tmp_path, capsys):
    """A llama-bench record run with -fa off (its flash_attn field 0) is priced unfused: every CPU attention of
    the all-CPU run pays cpu_mm_attention_s and three operators more (at 10 us each here) than the same record under
    -fa auto (-1), hand-worked; so calibrate-peer gives back the host's 1.25 from -fa off records, and from the same
    times recorded as auto it would not."""
    import json
    from hwmodels.presets import load_machine
    from sim.model.shapes import ATTENTION_KINDS, FLASH_ATTN_SAVED_OPS
    from sim.engines.llamacpp.bench import run_of
    from sim.engines.llamacpp.fitting import host_scaled
    from validate.peer_calibration import predict, with_peer
    path = tmp_path / "m.gguf"
    write_llama(path)
    shape = load_model(str(path))
    m = load_machine("h200-testbox")
    m = with_peer(m, "llamacpp", costs_of(m, "llamacpp").model_copy(update={"cpu_op_s": 1e-5}))
    spec = host_scaled(costs_of(m, "llamacpp"), 1.25)
    truth = with_peer(m, "llamacpp", spec)
    rec = {"n_prompt": 0, "n_gen": 16, "n_gpu_layers": 0, "avg_ns": 1.0}
    off, auto = (run_of(dict(rec, flash_attn=fa), shape, truth, None, "") for fa in (0, -1))
    assert off.peer_update == {"flash_attn": "off"} and auto.peer_update == {"flash_attn": "auto"}
    attentions = sum(u.kind in ATTENTION_KINDS for u in shape.units)
    extra = attentions * (spec.cpu_mm_attention_s + FLASH_ATTN_SAVED_OPS * spec.cpu_op_s)
    t_off, t_auto = (predict(shape, truth, r)["time_per_token_s"] for r in (off, auto))
    assert attentions > 0 and t_off - t_auto == pytest.approx(extra, rel=1e-6)
    profile = tmp_path / "m.json"
    profile.write_text(m.model_dump_json())
    scales = []
    for fa in (0, -1):
        bench = tmp_path / f"bench{fa}.json"
        bench.write_text(json.dumps([dict(rec, flash_attn=fa, avg_ns=t_off * 16e9)]))
        out = tmp_path / f"p{fa}.json"
        assert main(["calibrate-peer", str(path), "--bench", str(bench), "--profile", str(profile), "--out", str(out),
                     "--json"]) == 0
        scales.append(json.loads(capsys.readouterr().out)["host_cpu_scale"])
    assert scales[0] == pytest.approx(1.25, rel=1e-3) and scales[1] < 1.25 * 0.99
