"""Hostile inputs by class, for the readers the first fuzz classes (tests/test_fuzz_cli.py) do not reach: GGUF
files, llama-bench output, every number of a machine profile and of a plan's codec, outputs that exist or cannot
be named, names from files with control characters, and valid requests whose JSON answers must stay valid.

Each generator draws one case from its class: {'argv', 'files' (name -> bytes), 'field', 'expect' (the exit codes
that are right), 'category'}. Used by benchmarks/bench_fuzz.py (>= 1,000 cases, each in its own process) and by
tests/test_fuzz_hostile.py (a fixed sample, in-process).
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import gguf
import numpy as np

from hwmodels import get_machine

INF, NAN = float("inf"), float("nan")
HUGE_INT = "9" * 5000           # more digits than Python's int() reads from text
BAD_INTS = [-5, 10**12, 1.5, "3", [1], {}, True, 1e308, NAN, INF]
BAD_NS = [0, -1, 1e308, 1e-300, "1e6", [1e6], None, True, NAN, INF]
BENCH_BAD = {"n_prompt": BAD_INTS, "n_gen": BAD_INTS, "n_gpu_layers": BAD_INTS, "n_cpu_moe": BAD_INTS,
             "n_depth": BAD_INTS, "n_threads": BAD_INTS + [0], "avg_ns": BAD_NS,
             "samples_ns": [[], [0], [1e308], "x", [[1e6]], [None], [NAN], 5],
             "flash_attn": [[1], {"a": 1}, 1.5], "load_mode": [[1], 3, {}], "no_host": [[1], "yes", 1.5],
             "use_mmap": [[1], "yes", 1.5], "args": [7, [1, 2], "x", {"a": 1}]}
RATE_BAD = [INF, NAN, 1e308, -1, 1e-300, 0, "x", [1], HUGE_INT]       # a speed: bytes (or FLOP) per second
TIME_BAD = [INF, NAN, 1e308, -1, 2.0, 1e6, "x", [1], HUGE_INT]        # a per-event cost in seconds
PROFILE_PATHS = [("peers.llamacpp.step_s", TIME_BAD), ("peers.accelerate.load_module_s", TIME_BAD),
                 ("peers.airllm.load_unit_s", TIME_BAD), ("peers.llamacpp.cpu_bytes_per_s", RATE_BAD),
                 ("peers.llamacpp.cpu_compute_scale", [INF, NAN, 1e308, 0, -1, 1e-300]),
                 ("engine.stream_startup_s", [INF, NAN, 1e308, -1, 1e5]),
                 ("engine.stream_overhead_s.ram_pinned", TIME_BAD), ("host_memory.pin_bytes_per_s", RATE_BAD),
                 ("host_memory.first_touch_bytes_per_s", RATE_BAD), ("cpu.llc_bytes", [INF, -1, 1e300, 2**70]),
                 ("cpu.unpack_bytes_per_s_per_thread.zstd", RATE_BAD), ("storage.request_latency_s", TIME_BAD),
                 ("link.latency_s", TIME_BAD), ("gpu.graph_kernel_overhead_s", TIME_BAD),
                 ("link.by_size", [[{"nbytes": 2**20, "pinned_bytes_per_s": v, "pageable_bytes_per_s": 1e10}]
                                   for v in (INF, 1e308, 1e-300, -1)])]
CODEC_BAD = {"unpack_bytes_per_s": [1e-300, 0, -1, 1e308, INF, NAN, 1.0], "threads": [0, 10**6, 1.5, -1],
             "chunk_bytes": [-1, 2**62, 1.5], "ratio": [0, 1.5, NAN, -0.5]}
HOSTILE_NAMES = ["\x1b[2J\x1b[31mevil\x07", "a\nb\rc", "\u202eevil", "x" * 5000, "\x00null", "\x1b]0;title\x07" * 50]


def _json(data) -> bytes:
    """JSON with the non-finite numbers and giant integers a hostile file may hold (NaN, Infinity, 5,000 digits)."""
    text = json.dumps(data, allow_nan=True)
    return text.replace(f'"{HUGE_INT}"', HUGE_INT).encode()


def _set(data: dict, path: str, value) -> None:
    node = data
    *head, last = path.split(".")
    for key in head:
        node = node.setdefault(key, {})
    node[last] = value


def write_gguf(path: Path, name: str = "tiny") -> Path:
    """A valid 2-block llama GGUF of F32 zeros (hidden 64), the base the GGUF classes damage."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    for add, value in ((w.add_block_count, 2), (w.add_embedding_length, 64), (w.add_feed_forward_length, 128),
                       (w.add_head_count, 4), (w.add_head_count_kv, 2), (w.add_context_length, 256),
                       (w.add_vocab_size, 128)):
        add(value)
    tensors = {"token_embd.weight": (128, 64), "output_norm.weight": (64,), "output.weight": (128, 64)}
    for i in range(2):
        tensors |= {f"blk.{i}.attn_q.weight": (64, 64), f"blk.{i}.attn_k.weight": (32, 64),
                    f"blk.{i}.attn_v.weight": (32, 64), f"blk.{i}.attn_output.weight": (64, 64),
                    f"blk.{i}.ffn_gate.weight": (128, 64), f"blk.{i}.ffn_up.weight": (128, 64),
                    f"blk.{i}.ffn_down.weight": (64, 128), f"blk.{i}.attn_norm.weight": (64,),
                    f"blk.{i}.ffn_norm.weight": (64,)}
    for t, shape in tensors.items():
        w.add_tensor(t, np.zeros(shape, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def hostile_inputs(inputs: dict[str, Path]) -> dict[str, Path]:
    """The first classes' inputs plus a valid GGUF and a full profile (peers' costs included)."""
    folder = inputs["dir"]
    gg = write_gguf(folder / "model.gguf")
    prof = folder / "full-profile.json"
    prof.write_text(json.dumps({"machine": json.loads(get_machine("h200-testbox").model_dump_json())}))
    return dict(inputs, gguf=gg, full_profile=prof)


class HostileGenerators:
    """One generator per class of hostile input; random draws in case order (a seed gives the same cases)."""

    def __init__(self, rng: random.Random, inp: dict[str, Path]):
        self.rng = rng
        self.c, self.pl, self.ck = str(inp["config"]), str(inp["plan"]), str(inp["ckpt"])
        self.gguf = inp["gguf"].read_bytes()
        self.plan = json.loads(inp["plan"].read_text())
        self.profile = json.loads(inp["full_profile"].read_text())
        self.config = json.loads(inp["config"].read_text())

    def _gguf_cmd(self) -> list[str]:
        return self.rng.choice([["info", "m.gguf"], ["simulate", "m.gguf", "--new-tokens", "2"],
                                ["plan", "m.gguf", "--time-budget", "0.2"],
                                ["calibrate-peer", "m.gguf", "--bench", "b.json", "--out", "o.json"]])

    def gguf_damaged(self) -> dict:
        """Truncated, bit-flipped or count-inflated GGUF files: refused, or (a flip that left it valid) read."""
        rng, blob = self.rng, bytearray(self.gguf)
        kind = rng.choice(["truncate", "flip", "counts", "type", "length", "zero"])
        if kind == "truncate":
            blob = blob[: rng.randint(0, len(blob) - 1)]
        elif kind == "flip":
            for _ in range(rng.randint(1, 8)):
                blob[rng.randrange(min(len(blob), 4096))] ^= 1 << rng.randrange(8)
        elif kind == "counts":  # n_tensors or n_kv (after magic and version) claims up to 2**64 - 1
            at = rng.choice([8, 16])
            blob[at:at + 8] = rng.choice([2**63, 2**64 - 1, 10**9, 2**32]).to_bytes(8, "little")
        elif kind in ("type", "length"):  # a value type or a string length somewhere in the first kilobyte
            at = rng.randrange(24, min(len(blob) - 8, 1024))
            blob[at:at + (4 if kind == "type" else 8)] = rng.choice([2**31, 99, 2**32 - 1, 13]).to_bytes(
                4 if kind == "type" else 8, "little") if kind == "type" else (2**62).to_bytes(8, "little")
        else:
            blob = bytearray()
        bench = [{"n_prompt": 0, "n_gen": 8, "n_gpu_layers": 0, "avg_ns": 1e7}]
        return {"argv": self._gguf_cmd(), "files": {"m.gguf": bytes(blob), "b.json": json.dumps(bench).encode()},
                "field": "m.gguf", "expect": (0, 2) if kind in ("flip", "type", "length") else (2,)}

    def bench_field(self) -> dict:
        """A llama-bench record with one field of the wrong type or out of its range."""
        rng = self.rng
        field = rng.choice(sorted(BENCH_BAD))
        rec = {"n_prompt": 0, "n_gen": 8, "n_gpu_layers": 0, "avg_ns": 1e7, field: rng.choice(BENCH_BAD[field])}
        if rec[field] is None:
            del rec[field]
        recs = [rec] if rng.random() < 0.5 else [{"n_prompt": 0, "n_gen": 8, "n_gpu_layers": 99, "avg_ns": 1e6}, rec]
        return {"argv": ["calibrate-peer", self.c, "--bench", "b.json", "--out", "o.json"],
                "files": {"b.json": _json(recs)}, "field": field}

    def bench_file(self) -> dict:
        """llama-bench output that is no list of records at all."""
        rng = self.rng
        text = rng.choice(["", "{", "[]", "null", "[" * 60000 + "]" * 60000, "\ufeff[1]", "[" + HUGE_INT + "]",
                           '{"n_gen": 1}\n{bad', "[" + ",".join(["{}"] * 10001) + "]", "\udcff"])
        return {"argv": ["calibrate-peer", self.c, "--bench", "b.json", "--out", "o.json"],
                "files": {"b.json": text.encode("utf-8", "surrogateescape")}, "field": "bench"}

    def profile_number(self) -> dict:
        """A machine profile with one number anywhere (a part, an engine's costs, the engine, the copy table)
        non-finite, absurd or of the wrong type."""
        rng = self.rng
        path, values = rng.choice(PROFILE_PATHS)
        data = json.loads(json.dumps(self.profile))
        _set(data["machine"], path, rng.choice(values))
        cmd = rng.choice([["info", "qwen3-14b"], ["simulate", "qwen3-14b", "--policy", "llamacpp", "--new-tokens", "2"],
                          ["plan", "qwen3-14b", "--engine", "llamacpp", "--time-budget", "0.2"],
                          ["simulate", "qwen3-14b", "--policy", "accelerate", "--new-tokens", "2"]])
        field = path.split(".")[-1] if path != "link.by_size" else "by_size"
        field = "p.json" if HUGE_INT.encode() in _json(data) else field  # no parser names the key of that number
        return {"argv": cmd + ["--machine", "p.json"], "files": {"p.json": _json(data)}, "field": field}

    def plan_codec(self) -> dict:
        """A plan whose codec has a speed, a thread count, a chunk or a ratio no machine has."""
        rng = self.rng
        field = rng.choice(sorted(CODEC_BAD))
        codec = {"name": "zstd", "ratio": 0.7, "unpack_bytes_per_s": 4e9, "threads": 4, "chunk_bytes": 2**22}
        codec[field] = rng.choice(CODEC_BAD[field])
        plan = dict(self.plan, codec=codec)
        return {"argv": ["simulate", self.c, "--plan", "plan.json", "--new-tokens", "2"],
                "files": {"plan.json": _json(plan)}, "field": field}

    def output_exists(self) -> dict:
        """An output that exists already, without --force: refused before any work, the file kept."""
        rng, c = self.rng, self.c
        argv, name = rng.choice([
            (["plan", c, "--out", "old.json"], "old.json"), (["pareto", c, "--out", "old.png"], "old.png"),
            (["simulate", c, "--new-tokens", "2", "--gantt", "old.png"], "old.png"),
            (["simulate", c, "--new-tokens", "2", "--trace", "old.json"], "old.json"),
            (["whatif", c, "--vary", "storage=sata", "--plot", "old.png"], "old.png"),
            (["hw", "detect", "--out", "old.json"], "old.json"), (["calibrate", "--out", "old.json"], "old.json"),
            (["calibrate-peer", c, "--bench", "b.json", "--out", "old.json"], "old.json"),
            (["validate", "--checkpoint", self.ck, "--plan", "stream", "--device", "cpu", "--out", "rep"],
             "rep/report.json")])
        return {"argv": argv, "files": {name: b"kept", "b.json": b"[]"}, "field": "--force"}

    def output_name(self) -> dict:
        """An output name longer than a folder allows, or not a file name."""
        rng, c = self.rng, self.c
        name = rng.choice(["x" * rng.randint(256, 400) + ".json", "\x00.json", " ", "/proc/self/x.json"])
        argv = rng.choice([["plan", c, "--out", name], ["simulate", c, "--new-tokens", "2", "--trace", name],
                           ["hw", "detect", "--out", name]])
        return {"argv": argv, "field": "out" if "--out" in argv else "trace"}

    def hostile_name(self) -> dict:
        """A model named with control characters or 5,000 characters: read, and printed escaped and cut."""
        rng = self.rng
        name = rng.choice(HOSTILE_NAMES)
        argv = rng.choice([["info", "config.json"], ["plan", "config.json", "--time-budget", "0.2"],
                           ["simulate", "config.json", "--new-tokens", "2"]]) + rng.choice([[], ["--json"]])
        cfg = dict(self.config, _name_or_path=name)
        return {"argv": argv, "files": {"config.json": json.dumps(cfg).encode()}, "field": "", "expect": (0,)}

    def json_answer(self) -> dict:
        """A valid request at the edge of what is allowed (one token, the smallest budget that fits, a profile
        whose values sit at their ranges' ends): exit 0 and an answer of valid JSON, every number finite."""
        rng, c = self.rng, self.c
        argv = rng.choice([
            ["simulate", c, "--policy", rng.choice(["stream", "accelerate", "airllm", "llamacpp", "resident"]),
             "--new-tokens", "1", "--prompt-tokens", "1"],
            ["plan", c, "--time-budget", "0.2", "--new-tokens", "1"], ["info", c], ["gap"], ["hw", "list"],
            ["hw", "show", "h200-testbox"], ["simulate", "m.gguf", "--new-tokens", "2"], ["info", "m.gguf"],
            ["simulate", c, "--machine", "edge.json", "--new-tokens", "2"]])
        data = json.loads(json.dumps(self.profile))
        _set(data["machine"], "peers.llamacpp.step_s", 1.0)
        _set(data["machine"], "storage.cold_read_bytes_per_s", 1e6)
        return {"argv": argv + ["--json"], "files": {"m.gguf": self.gguf, "edge.json": _json(data)}, "field": "",
                "expect": (0,)}


def generators(rng: random.Random, inputs: dict[str, Path]) -> list:
    g = HostileGenerators(rng, inputs)
    return [g.gguf_damaged, g.bench_field, g.bench_file, g.profile_number, g.plan_codec, g.output_exists,
            g.output_name, g.hostile_name, g.json_answer]


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e]")
NONFINITE = re.compile(r"(?i)(?<![\w'\"])(nan|-?inf(inity)?)(?![\w'\"])")


def answer_problems(argv: list[str], stdout: str) -> list[str]:
    """What is wrong with an answer printed on stdout: invalid JSON (NaN or Infinity included) with --json, a
    non-finite number, a raw control character."""
    out = []
    if "--json" in argv:
        try:
            json.loads(stdout, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
        except ValueError:
            out.append("invalid_json")
    if NONFINITE.search(stdout):
        out.append("nonfinite_printed")
    if CONTROL.search(stdout):
        out.append("control_chars")
    return out
