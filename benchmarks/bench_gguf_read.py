"""GGUF header reading cost: a real-size tokenizer, and hostile headers.

Writes, in a temporary folder, a 32-block llama GGUF (291 small tensors) carrying a tokenizer the size of Qwen's
(--tokens entries, as many merges, their scores and types, an 8 KB chat template), then times the bounded header
pass (sim/model/gguf_header.py) and the whole GGUF -> ModelShape (best of --repeat runs, with the peak of Python
allocations traced in one more run), and, with --gguf-reader, the `gguf` package's GGUFReader on the same file for
comparison. Then the hostile headers: an array claiming 2**40 elements, and a 2M-entry token array.

    python benchmarks/bench_gguf_read.py --tokens 150000 --gguf-reader
"""
from __future__ import annotations

import argparse
import json
import statistics
import struct
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import gguf  # noqa: E402
import numpy as np  # noqa: E402

from hwmodels.units import InputError  # noqa: E402
from sim.model.gguf_header import read_header  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402

H, FF, VOCAB, BLOCKS = 64, 128, 256, 32


def write_model(path: Path, tokens: int) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(BLOCKS)
    w.add_embedding_length(H)
    w.add_head_count(4)
    w.add_feed_forward_length(FF)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok{i}" for i in range(tokens)])
    w.add_token_merges([f"t{i} k{i}" for i in range(tokens)])
    w.add_token_scores([0.0] * tokens)
    w.add_token_types([1] * tokens)
    w.add_chat_template("x" * 8192)
    w.add_tensor("token_embd.weight", np.zeros((VOCAB, H), np.float16))
    w.add_tensor("output_norm.weight", np.zeros(H, np.float32))
    w.add_tensor("output.weight", np.zeros((VOCAB, H), np.float16))
    for i in range(BLOCKS):
        for name, shape in (("attn_norm", (H,)), ("ffn_norm", (H,)), ("attn_q", (H, H)), ("attn_k", (H, H)),
                            ("attn_v", (H, H)), ("attn_output", (H, H)), ("ffn_gate", (FF, H)), ("ffn_up", (FF, H)),
                            ("ffn_down", (H, FF))):
            w.add_tensor(f"blk.{i}.{name}.weight", np.zeros(shape, np.float16 if len(shape) == 2 else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_claims(path: Path, count: int, body: bytes = b"") -> Path:
    """A header whose one metadata entry, tokenizer.ggml.tokens, claims `count` strings."""
    key = b"tokenizer.ggml.tokens"
    head = struct.pack("<IIQQ", gguf.GGUF_MAGIC, 3, 0, 1) + struct.pack("<Q", len(key)) + key
    path.write_bytes(head + struct.pack("<IIQ", gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING, count) + body)
    return path


def timed(fn, repeat: int) -> dict:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"best_s": round(min(times), 4), "median_s": round(statistics.median(times), 4),
            "peak_alloc_MiB": round(peak / 2**20, 2)}


def refused(path: Path) -> dict:
    t = time.perf_counter()
    try:
        load_model(str(path))
        out = "read"
    except InputError as exc:
        out = str(exc)
    return {"file_bytes": path.stat().st_size, "seconds": round(time.perf_counter() - t, 5), "outcome": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=150_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--gguf-reader", action="store_true", help="also time the gguf package's GGUFReader")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_model(Path(tmp) / "tokenizer.gguf", args.tokens)
        report = {"file_bytes": path.stat().st_size, "tokens": args.tokens,
                  "header_pass": timed(lambda: read_header(path), args.repeat),
                  "gguf_to_shape": timed(lambda: load_model(str(path)), args.repeat)}
        if args.gguf_reader:
            report["gguf_package_reader"] = timed(lambda: gguf.GGUFReader(str(path), "r"), max(1, args.repeat // 2))
        report["claims_2_40_strings"] = refused(write_claims(Path(tmp) / "claims.gguf", 2**40))
        report["token_array_2M"] = refused(write_claims(Path(tmp) / "two-million.gguf", 2_000_000,
                                                        bytes(8 * 2_000_000)))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
