"""Hostile GGUF headers, packed byte by byte here: each is refused in one sentence naming the file and the key, or
read, without looping over or allocating what its counts claim (memory bounded in a child process by
RLIMIT_AS: the file's size plus a small margin, where decoding the claims would need gigabytes)."""
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")

from hwmodels.units import InputError  # noqa: E402
from offloadsim.cli import main  # noqa: E402
from sim.model.gguf_header import MAX_ARRAY, Skipped, read_header  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
T = gguf.GGUFValueType
F32 = int(gguf.GGMLQuantizationType.F32)
H, FF, VOCAB = 64, 128, 256


def _s(text: str, o="<") -> bytes:
    raw = text.encode()
    return struct.pack(o + "Q", len(raw)) + raw


def kv(key: str, vtype: int, payload: bytes, o="<") -> bytes:
    return _s(key, o) + struct.pack(o + "I", vtype) + payload


def u32(key: str, value: int, o="<") -> bytes:
    return kv(key, T.UINT32, struct.pack(o + "I", value), o)


def string(key: str, value: str, o="<") -> bytes:
    return kv(key, T.STRING, _s(value, o), o)


def array_head(itype: int, count: int, o="<") -> bytes:
    return struct.pack(o + "IQ", itype, count)


def raw_gguf(path: Path, kvs: list[bytes], tensors: list[tuple[str, tuple[int, ...]]], o="<", version=3,
             n_kv=None, n_tensors=None, align=32) -> Path:
    """A GGUF file from packed metadata entries and F32 tensors (dims innermost first, data zeros, at most 1 MiB)."""
    infos, offset = [], 0
    for name, dims in tensors:
        infos.append(_s(name, o) + struct.pack(o + "I", len(dims)) + b"".join(struct.pack(o + "Q", d) for d in dims)
                     + struct.pack(o + "IQ", F32, offset))
        n = 4
        for d in dims:
            n *= d
        offset += -(-n // align) * align
    head = (struct.pack("<I", gguf.GGUF_MAGIC) + struct.pack(o + "IQQ", version, len(tensors) if n_tensors is None
                                                             else n_tensors, len(kvs) if n_kv is None else n_kv)
            + b"".join(kvs) + b"".join(infos))
    head += bytes(-len(head) % align)
    path.write_bytes(head + bytes(min(offset, 2**20)))  # data past 1 MiB left out (a truncated file)
    return path


def llama_kvs(o="<") -> list[bytes]:
    return [string("general.architecture", "llama", o), u32("llama.block_count", 1, o),
            u32("llama.embedding_length", H, o), u32("llama.attention.head_count", 4, o),
            u32("llama.feed_forward_length", FF, o)]


LLAMA_TENSORS = [("token_embd.weight", (H, VOCAB)), ("output.weight", (H, VOCAB)), ("blk.0.attn_q.weight", (H, H)),
                 ("blk.0.attn_k.weight", (H, H)), ("blk.0.attn_v.weight", (H, H)),
                 ("blk.0.attn_output.weight", (H, H)), ("blk.0.ffn_gate.weight", (H, FF)),
                 ("blk.0.ffn_up.weight", (H, FF)), ("blk.0.ffn_down.weight", (FF, H))]
BLOCK_BYTES = 4 * (4 * H * H + 3 * H * FF)


def test_a_raw_llama_reads_with_its_bytes(tmp_path):
    m = load_model(str(raw_gguf(tmp_path / "ok.gguf", llama_kvs(), LLAMA_TENSORS)))
    assert [u.nbytes for u in m.units] == [4 * H * VOCAB, BLOCK_BYTES, 4 * H * VOCAB]


def test_a_big_endian_file_reads_the_same(tmp_path):
    m = load_model(str(raw_gguf(tmp_path / "be.gguf", llama_kvs(">"), LLAMA_TENSORS, o=">")))
    assert [u.nbytes for u in m.units] == [4 * H * VOCAB, BLOCK_BYTES, 4 * H * VOCAB]


def test_tokenizer_arrays_are_skipped_and_short_numeric_arrays_kept(tmp_path):
    tokens = kv("tokenizer.ggml.tokens", T.ARRAY, array_head(T.STRING, 3) + _s("a") + _s("bc") + _s(""))
    kept = kv("llama.attention.head_count_kv", T.ARRAY, array_head(T.UINT32, 2) + struct.pack("<II", 4, 4))
    meta, tensors = read_header(raw_gguf(tmp_path / "t.gguf", llama_kvs() + [tokens, kept], LLAMA_TENSORS))
    assert meta["tokenizer.ggml.tokens"] == Skipped("an array of 3 strings")
    assert meta["llama.attention.head_count_kv"] == (4, 4) and meta["llama.block_count"] == 1
    assert tensors["blk.0.ffn_down.weight"] == ("F32", 4 * FF * H, FF * H)


# each: (name, metadata entries after llama's, tensors, header overrides, words the sentence must hold)
HOSTILE = {
    "array of 2**40 strings": ([kv("tokenizer.ggml.tokens", T.ARRAY, array_head(T.STRING, 2**40))], LLAMA_TENSORS,
                               {}, ["'tokenizer.ggml.tokens'", "1,099,511,627,776"]),
    "array of 2**40 bytes": ([kv("llama.x", T.ARRAY, array_head(T.UINT8, 2**40))], LLAMA_TENSORS, {}, ["'llama.x'"]),
    "array that fits the limit but not the file": ([kv("llama.x", T.ARRAY, array_head(T.UINT64, MAX_ARRAY))],
                                                  LLAMA_TENSORS, {}, ["'llama.x'", "bytes are left"]),
    "nested arrays": ([kv("llama.x", T.ARRAY, array_head(T.ARRAY, 3) + array_head(T.ARRAY, 2**40))], LLAMA_TENSORS,
                      {}, ["'llama.x'"]),
    "string past the end": ([kv("general.name", T.STRING, struct.pack("<Q", 2**62))], LLAMA_TENSORS, {},
                            ["'general.name'"]),
    "strings running past the end": ([kv("tokenizer.ggml.merges", T.ARRAY, array_head(T.STRING, 2)
                                         + struct.pack("<Q", 2**50))], LLAMA_TENSORS, {}, ["'tokenizer.ggml.merges'"]),
    "unknown value type": ([kv("llama.x", 99, b"")], LLAMA_TENSORS, {}, ["'llama.x'", "99"]),
    "duplicate key": ([u32("llama.block_count", 2)], LLAMA_TENSORS, {}, ["'llama.block_count' twice"]),
    "2**60 tensors": ([], LLAMA_TENSORS, {"n_tensors": 2**60}, ["tensors"]),
    "2**40 metadata entries": ([], LLAMA_TENSORS, {"n_kv": 2**40}, ["metadata"]),
    "more entries than bytes": ([], LLAMA_TENSORS, {"n_kv": 60_000}, ["bytes are left"]),
    "version 1": ([], LLAMA_TENSORS, {"version": 1}, ["version 1"]),
    "bad alignment": ([u32("general.alignment", 3)], LLAMA_TENSORS, {}, ["'general.alignment'"]),
    "tensor data past the end": ([], LLAMA_TENSORS + [("blk.0.big.weight", (2**20, 2**20))], {}, ["'blk.0.big.weight'"]),
    "five dimensions": ([], [("token_embd.weight", (1, 1, 1, 1, 1))], {}, ["'token_embd.weight'", "dimensions"]),
    "architecture as an array": ([], LLAMA_TENSORS, {"arch": kv("general.architecture", T.ARRAY, array_head(
        T.STRING, 1) + _s("llama"))}, ["'general.architecture'", "array of 1 strings"]),
    "architecture as a number": ([], LLAMA_TENSORS, {"arch": u32("general.architecture", 7)},
                                 ["'general.architecture'", "int 7"]),
    "unread key as a string": ([string("llama.context_length", "x")], LLAMA_TENSORS, {}, []),
    "no tensors": ([], [], {}, ["no tensors"]),
}


def _hostile(tmp_path: Path, case: str) -> Path:
    extra, tensors, over, _ = HOSTILE[case]
    kvs = llama_kvs() + extra
    if "arch" in over:
        kvs[0] = over["arch"]
    return raw_gguf(tmp_path / "bad.gguf", kvs, tensors, **{k: v for k, v in over.items() if k != "arch"})


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_header_is_one_sentence(tmp_path, capsys, case):
    path = _hostile(tmp_path, case)
    if case == "unread key as a string":  # a key the shape does not read may hold anything: this one reads
        assert load_model(str(path)).n_blocks == 1
        return
    with pytest.raises(InputError) as err:
        load_model(str(path))
    text = str(err.value)
    assert str(path) in text and all(w in text for w in HOSTILE[case][3]), text
    assert main(["info", str(path)]) == 2
    out = capsys.readouterr().err.strip()
    assert len(out.splitlines()) == 1 and "Traceback" not in out


@pytest.mark.parametrize("key,payload,words", [
    ("llama.block_count", string("llama.block_count", "32"), "the str '32'"),
    ("llama.block_count", kv("llama.block_count", T.ARRAY, array_head(T.UINT32, 2) + struct.pack("<II", 1, 2)),
     "an array of 2 values"),
    ("llama.embedding_length", kv("llama.embedding_length", T.FLOAT32, struct.pack("<f", 64.0)), "the float 64.0"),
    ("llama.attention.head_count", kv("llama.attention.head_count", T.BOOL, b"\x01"), "the bool True"),
    ("llama.feed_forward_length", kv("llama.feed_forward_length", T.INT32, struct.pack("<i", -5)), "the int -5")])
def test_a_count_of_the_wrong_type_names_its_key(tmp_path, key, payload, words):
    kvs = [payload if e.startswith(_s(key)) else e for e in llama_kvs()]
    with pytest.raises(InputError, match="GGUF metadata") as err:
        load_model(str(raw_gguf(tmp_path / "t.gguf", kvs, LLAMA_TENSORS)))
    assert repr(key) in str(err.value) and words in str(err.value)


def test_a_per_layer_array_of_one_value_is_that_value(tmp_path):
    kvs = llama_kvs() + [kv("llama.attention.head_count_kv", T.ARRAY, array_head(T.UINT32, 1) + struct.pack("<I", 2))]
    m = load_model(str(raw_gguf(tmp_path / "t.gguf", kvs, LLAMA_TENSORS)))
    assert m.units[1].kv_bytes_per_token == 2 * 2 * (H // 4) * 2  # K and V, 2 heads of 16, 16-bit


CHILD = """
import json, resource, sys
import gguf  # the package is loaded before the limit, as in any run
from hwmodels.units import InputError
from sim.model.resolve import load_model
vm = int(next(l for l in open('/proc/self/status') if l.startswith('VmSize')).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + int(sys.argv[2]), vm + int(sys.argv[2])))
resource.setrlimit(resource.RLIMIT_CPU, (60, 60))
try:
    m = load_model(sys.argv[1])
    print(json.dumps({"blocks": m.n_blocks, "bytes": m.total_bytes}))
except InputError as exc:
    print(json.dumps({"error": str(exc)}))
"""


def _bounded(path: Path, margin_bytes: int) -> dict:
    """load_model(path) in a child whose address space may grow by `margin_bytes` (the mapped file included)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(margin_bytes)], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_tokenizer_at_the_array_limit_reads_in_bounded_memory(tmp_path):
    """MAX_ARRAY empty tokens (8 MiB): decoding them as the gguf package's reader does takes over 1 GB; skipping
    them fits the file's size plus 64 MiB."""
    tokens = kv("tokenizer.ggml.tokens", T.ARRAY, array_head(T.STRING, MAX_ARRAY) + bytes(8 * MAX_ARRAY))
    path = raw_gguf(tmp_path / "tokens.gguf", llama_kvs() + [tokens], LLAMA_TENSORS)
    got = _bounded(path, path.stat().st_size + 64 * 2**20)
    assert got == {"blocks": 1, "bytes": 2 * 4 * H * VOCAB + BLOCK_BYTES}


def test_two_million_tokens_are_refused_before_any_is_read(tmp_path):
    """2M tokens (16 MB), over MAX_ARRAY: refused from the count alone, the strings never walked (their lengths
    here would run past the file's end, a second refusal, which must not be the one given)."""
    n = 2_000_000
    tokens = kv("tokenizer.ggml.tokens", T.ARRAY, array_head(T.STRING, n) + struct.pack("<Q", 2**50) + bytes(8 * n))
    path = raw_gguf(tmp_path / "tokens.gguf", llama_kvs() + [tokens], LLAMA_TENSORS)
    with pytest.raises(InputError, match="2,000,000 elements of string for metadata 'tokenizer.ggml.tokens', more than"):
        load_model(str(path))


@pytest.mark.parametrize("itype", [T.STRING, T.UINT8])
def test_a_claimed_2_40_element_array_is_refused_in_bounded_memory(tmp_path, itype):
    tokens = kv("tokenizer.ggml.tokens", T.ARRAY, array_head(itype, 2**40))
    path = raw_gguf(tmp_path / "claims.gguf", llama_kvs() + [tokens], [])
    assert path.stat().st_size < 1024
    got = _bounded(path, 64 * 2**20)
    assert "'tokenizer.ggml.tokens'" in got["error"] and "1,099,511,627,776" in got["error"]
