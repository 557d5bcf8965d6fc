"""Fuzz benchmark: >= 1,000 generated hostile inputs across every command and reader, each in its own process.

Every case is a command line plus the files it reads, drawn from a class of hostile input (bad flags, configs,
plans, profiles, safetensors, stores and paths: tests/test_fuzz_cli.py; GGUF files, llama-bench output, every number
of a profile and of a plan's codec, existing or unnameable outputs, names with control characters, edge requests
whose JSON must stay valid: tests/fuzz_hostile.py). Each runs in a forked child (the parent has imported offloadsim
and torch once, so a case costs milliseconds) with stdout/stderr in files, an address-space limit of its start size
+ 4 GiB, a 30 s wall clock and OFFLOADSIM_DEBUG=1 (so an unexpected exception shows as a traceback instead of the
CLI's one-line internal error). A refused case is correct when it exits 2 with one line on stderr naming the field;
an accepted one (a hostile name, an edge request) when it exits 0 with an answer of valid JSON (with --json), no
non-finite number and no raw control character; and in both, no file of its folder changed, added or left behind.
Classes counted: tracebacks, hangs (> 30 s), memory (peak > 1 GiB above the start, or the CLI's out-of-memory
sentence), wrong exit codes, files changed, poor messages, invalid JSON, non-finite numbers printed, control
characters printed.

    python benchmarks/bench_fuzz.py --cases 2000 --out lab/data/fuzz.json
    python benchmarks/bench_fuzz.py --cases 2000 --part 1/4 --out /tmp/fuzz-1.json   # a quarter of the cases
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fuzz_hostile import answer_problems, generators, hostile_inputs  # noqa: E402
from tests.test_fuzz_cli import CONFIG, make_inputs, snapshot  # noqa: E402

TIMEOUT_S = 30.0
MEMORY_BYTES = 2**30
SIZES = ["4XB", "nan", "inf", "1e400GiB", "-4GiB", "", "GiB", "4 Q", "0x10GB", "1e30GiB", "four", "--1GB", "NaNGB",
         "4iB", "1,5GB", "4GiB4", "\u0664GiB", "1e-400GB", "+-4GB", "4..0GB"]
COUNTS = ["0", "-1", "-100", "10000000", "1000000000", "1e7", "1e9", "1.5", "x", "", "nan", "0x10", "99999999999999999999"]
REALS = ["nan", "inf", "-inf", "-1", "1e400", "x", "", "-0.5", "1e308"]
FIELD_VALUES = [-1, 0, -(10**12), 10**13, 1.5, "64", [], {}, True, None, "x" * 200, [[[[1]]]]]


def _rand_text(rng: random.Random, n: int = 8) -> str:
    return "".join(rng.choice("abcXYZ019=,.-_/ \t!%") for _ in range(rng.randint(0, n)))


class _Generators:
    """One generator per category of bad input; each returns {'argv', 'files', 'field', ...} for one case. The
    random draws happen in case order, so a seed gives the same cases."""

    def __init__(self, rng: random.Random, inp: dict[str, Path]):
        self.rng = rng
        self.c, self.pl, self.pr, self.ck = (str(inp[k]) for k in ("config", "plan", "profile", "ckpt"))
        self.plan = json.loads(inp["plan"].read_text())
        self.prof = json.loads(inp["profile"].read_text())
        self.prof_fields = [(p, f) for p in ("gpu", "link", "storage", "host_memory", "cpu")
                            for f, v in self.prof["machine"][p].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        self.good_st = (inp["ckpt"] / "model.safetensors").read_bytes()

    def size(self) -> dict:
        rng, c, ck = self.rng, self.c, self.ck
        cmd, flag = rng.choice([("simulate", "--vram"), ("simulate", "--ram"), ("simulate", "--pinned"),
                                ("plan", "--vram"), ("plan", "--ram"), ("plan", "--pinned"), ("pareto", "--ram"),
                                ("pareto", "--vram"), ("info", "--unpack-speed"),
                                ("validate", "--vram"), ("validate", "--ram")])
        v = rng.choice(SIZES + [_rand_text(rng)])
        if cmd == "validate":
            return {"argv": ["validate", "--checkpoint", ck, "--plan", "stream", "--device", "cpu", flag, v, "--out", "rep"],
                    "field": flag[2:]}
        return {"argv": [cmd, rng.choice(["qwen3-14b", c]), flag, v], "field": flag[2:]}

    def above_hardware(self) -> dict:
        rng = self.rng
        flag, v = rng.choice([("--vram", "40GiB"), ("--vram", "1TiB"), ("--ram", "200GiB"), ("--ram", "1PiB")])
        return {"argv": [rng.choice(["simulate", "plan"]), "qwen3-14b", "--machine", "rtx3080-laptop", flag, v],
                "field": flag[2:]}

    def count(self) -> dict:
        rng, ck = self.rng, self.ck
        cmd, flag = rng.choice([("simulate", "--batch"), ("simulate", "--prompt-tokens"), ("simulate", "--new-tokens"),
                                ("simulate", "--seed"), ("simulate", "--attribution"), ("plan", "--batch"),
                                ("plan", "--prompt-tokens"), ("plan", "--new-tokens"), ("pareto", "--points"),
                                ("pareto", "--new-tokens"), ("whatif", "--workers"), ("whatif", "--batch"),
                                ("whatif", "--prompt-tokens"), ("whatif", "--new-tokens"),
                                ("make-checkpoint", "--layers"), ("make-checkpoint", "--hidden"),
                                ("make-checkpoint", "--seed"), ("validate", "--batch"), ("validate", "--new-tokens"),
                                ("validate", "--prompt-tokens")])
        v = rng.choice(COUNTS)
        if flag in ("--seed", "--attribution") and v == "0":
            v = "-1"
        if flag == "--seed" and v in ("10000000", "1000000000"):  # valid seeds (0 .. 2**32-1)
            v = "4294967296"
        if flag == "--points" and v == "0x10":
            v = "1"
        argv = {"whatif": ["whatif", "qwen3-14b", "--vary", "storage=sata"],
                "make-checkpoint": ["make-checkpoint", "--preset", "qwen3-14b", "--out", "newckpt"],
                "validate": ["validate", "--checkpoint", ck, "--plan", "stream", "--device", "cpu", "--out", "rep"]
                }.get(cmd, [cmd, "qwen3-14b"])
        return {"argv": argv + [flag, v], "field": flag[2:]}

    def real(self) -> dict:
        rng = self.rng
        cmd, flag = rng.choice([("info", "--codec-ratio"), ("simulate", "--expert-skew"), ("plan", "--time-budget"),
                                ("plan", "--expert-skew")])
        return {"argv": [cmd, "qwen3-14b", flag, rng.choice(REALS)], "field": flag[2:]}

    def vary(self) -> dict:
        rng = self.rng
        v = rng.choice(["storage", "storage=", "storage=,", "=sata", "disk=sata", "storage=sata,sata", "vram=4XB",
                        "link=pcie9", "storage=nope", "ram=-1GiB", "gpu=h100,,", _rand_text(rng)])
        argv = ["whatif", "qwen3-14b", "--vary", v]
        if rng.random() < 0.2:
            sizes = ",".join(f"{g}GiB" for g in range(1, 26))  # 25 x 25 x 17 combinations: over the 10,000 cap
            argv = ["whatif", "qwen3-14b", "--vary", f"vram={sizes}", "--vary", f"ram={sizes}", "--vary",
                    "storage=" + ",".join(f"s{k}" for k in range(17))]
        return {"argv": argv, "field": "vary"}

    def config_field(self) -> dict:
        rng = self.rng
        field = rng.choice(["hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
                            "vocab_size", "num_key_value_heads", "head_dim"])
        v = rng.choice(FIELD_VALUES)
        cfg = dict(CONFIG)
        if v is None and field in ("num_key_value_heads", "head_dim"):
            v = 0
        if field == "num_key_value_heads" and v == 1.5:
            v = 3
        if v is None:
            del cfg[field]
        else:
            cfg[field] = v
        cmd = rng.choice([["info", "config.json"], ["simulate", "config.json", "--new-tokens", "2"],
                          ["plan", "config.json"]])
        return {"argv": cmd, "files": {"config.json": json.dumps(cfg).encode()}, "field": field}

    def config_file(self) -> dict:
        rng = self.rng
        kind = rng.choice(["truncated", "deep", "list", "quant", "binary", "type", "huge_layers", "experts"])
        cfg = dict(CONFIG)
        text = {"truncated": json.dumps(cfg)[: rng.randint(0, 40)], "deep": "[" * 100000 + "]" * 100000,
                "list": "[1, 2]", "quant": json.dumps(dict(cfg, quantization_config=rng.choice(["fp8", 3, [1]]))),
                "binary": "\udcff\udcfe", "type": json.dumps(dict(cfg, model_type=rng.choice(["bert", 3, None, ["llama"]]))),
                "huge_layers": json.dumps(dict(cfg, num_hidden_layers=10**8)),
                "experts": json.dumps(dict(cfg, model_type="mixtral", num_local_experts=8, num_experts_per_tok=9))}[kind]
        field = {"quant": "quantization_config", "type": "model_type", "huge_layers": "num_hidden_layers",
                 "experts": "num_experts_per_tok"}.get(kind, "config.json")
        return {"argv": ["info", "config.json"], "files": {"config.json": text.encode("utf-8", "surrogateescape")},
                "field": field}

    def plan_field(self) -> dict:
        rng, c, plan = self.rng, self.c, self.plan
        bad = {"version": [2, "1"], "model": [1, None], "placements": [[], "x", [{"unit": "x", "tier": "vram"}]],
               "prefetch_depth": [-1, 65, "x", 1.5], "vram_slots": [0, -1, 65], "pinned_slots": [-1, 10**6],
               "reader_threads": [0, 100], "overlap_copy": ["maybe", [1]], "expert_predictor_hit_rate": [-0.1, 1.5],
               "gpu_offload_min_tokens": [0, -5], "feasible": [False, "maybe"], "codec": ["zstd", {"ratio": 2}],
               "surprise": [1], "reason": [3]}
        field = rng.choice(sorted(bad))
        p = dict(plan, **{field: rng.choice(bad[field])})
        return {"argv": ["simulate", c, "--plan", "plan.json", "--new-tokens", "2"],
                "files": {"plan.json": json.dumps(p).encode()}, "field": "placements" if p.get("placements") == [] else field}

    def plan_file(self) -> dict:
        rng, c, plan = self.rng, self.c, self.plan
        text = rng.choice(["", "{", "[]", "null", "[" * 60000 + "]" * 60000, json.dumps(plan)[:100]])
        return {"argv": ["simulate", c, "--plan", "plan.json"], "files": {"plan.json": text.encode()}, "field": "plan"}

    def profile_field(self) -> dict:
        rng, prof, prof_fields = self.rng, self.prof, self.prof_fields
        part, field = rng.choice(prof_fields)
        if field.endswith("_s") and not field.endswith("_per_s"):  # latencies: zero and tiny are real values
            v = rng.choice([-1, "x", None, [], 1e30, -1e30])
        else:
            v = rng.choice([-1, 0, "x", None, [], 1e-12, 1e30, -1e30])
        p = json.loads(json.dumps(prof))
        p["machine"][part][field] = v
        return {"argv": [rng.choice(["info", "simulate", "plan"]), "qwen3-14b", "--machine", "p.json"],
                "files": {"p.json": json.dumps(p).encode()}, "field": field}

    def safetensors(self) -> dict:
        rng, good_st = self.rng, self.good_st
        kind = rng.choice(["zero", "truncate", "huge_header", "bad_json", "lying_shape", "garbage"])
        blob = {"zero": b"", "truncate": good_st[: rng.randint(1, len(good_st) - 1)],
                "huge_header": rng.choice([10**15, 2**63, 2**64 - 1]).to_bytes(8, "little") + good_st[8:],
                "bad_json": (20).to_bytes(8, "little") + b"{not json at all}   " + bytes(64),
                "lying_shape": None, "garbage": bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))}[kind]
        if blob is None:
            n = int.from_bytes(good_st[:8], "little")
            header = json.loads(good_st[8:8 + n])
            header["model.embed_tokens.weight"]["shape"] = [10**7, 10**8]
            raw = json.dumps(header).encode()
            blob = len(raw).to_bytes(8, "little") + raw + good_st[8 + n:]
        cmd = rng.choice([["info", "ck"], ["simulate", "ck", "--new-tokens", "2"], ["plan", "ck"],
                          ["validate", "--checkpoint", "ck", "--plan", "stream", "--device", "cpu", "--out", "rep"]])
        return {"argv": cmd, "files": {"ck/config.json": json.dumps(CONFIG).encode(), "ck/model.safetensors": blob},
                "field": "checkpoint"}

    def store(self) -> dict:
        rng, ck = self.rng, self.ck
        text = rng.choice(["{", '{"units": 3}', "[]", '{"units": {}}', '{"units": {"x": {"nbytes": -1, "raw": "a"}}}',
                           "[" * 60000 + "]" * 60000])
        return {"argv": ["validate", "--checkpoint", ck, "--plan", "stream", "--store", "st", "--device", "cpu",
                         "--out", "rep"], "files": {"st/store.json": text.encode()}, "field": "store"}

    def paths(self) -> dict:
        rng, c, pl, ck = self.rng, self.c, self.pl, self.ck
        kind = rng.choice(["trace_plan", "trace_missing", "gantt_dir", "proc", "same", "plan_over_cfg", "plan_missing",
                           "pareto_missing", "whatif_missing", "calibrate_missing", "ckpt_exists", "store_file",
                           "model_fifo", "model_loop", "model_dir_json", "machine_dir", "validate_out_file",
                           "cuda", "calibrate_405b", "calibrate_dir", "preset", "ckpt_missing"])
        spec = {
            "trace_plan": (["simulate", c, "--plan", pl, "--trace", pl], "trace"),
            "trace_missing": (["simulate", c, "--trace", "nodir/t.json"], "trace"),
            "gantt_dir": (["simulate", c, "--gantt", "."], "gantt"),
            "proc": (["simulate", c, "--trace", "/proc/self/x.json"], "trace"),
            "same": (["simulate", c, "--trace", "t.json", "--gantt", "t.json"], "gantt"),
            "plan_over_cfg": (["plan", c, "--out", c], "out"),
            "plan_missing": (["plan", c, "--out", "nodir/p.json"], "out"),
            "pareto_missing": (["pareto", c, "--out", "nodir/p.png"], "out"),
            "whatif_missing": (["whatif", c, "--vary", "storage=sata", "--plot", "nodir/w.png"], "plot"),
            "calibrate_missing": (["calibrate", "--out", "nodir/p.json"], "out"),
            "ckpt_exists": (["make-checkpoint", "--preset", "qwen3-14b", "--layers", "1", "--out", ck], "out"),
            "store_file": (["validate", "--checkpoint", ck, "--plan", "stream", "--store", c, "--out", "rep"], "store"),
            "model_fifo": (["info", "fifo.json"], "fifo.json"),
            "model_loop": (["info", "loop.json"], "loop.json"),
            "model_dir_json": (["info", "dir.json"], "dir.json"),
            "machine_dir": (["info", "qwen3-14b", "--machine", "dir.json"], "machine"),
            "validate_out_file": (["validate", "--checkpoint", ck, "--plan", "stream", "--out", c], "out"),
            "cuda": (["validate", "--checkpoint", ck, "--plan", "stream", "--device", "cuda", "--out", "rep"], "device"),
            "calibrate_405b": (["calibrate", "--model", "llama-3.1-405b", "--out", "p.json"], "model"),
            "calibrate_dir": (["calibrate", "--dir", "nodir", "--out", "p.json"], "dir"),
            "preset": (["make-checkpoint", "--preset", rng.choice(["nope", "", "qwen3"]), "--out", "nc"], "preset"),
            "ckpt_missing": (["validate", "--checkpoint", "nodir", "--plan", "stream"], "checkpoint"),
        }[kind]
        return {"argv": spec[0], "field": spec[1], "special": kind}

    def infeasible(self) -> dict:
        rng, c, pl = self.rng, self.c, self.pl
        return {"argv": ["plan", c, "--vram", rng.choice(["1KiB", "100", "0"]), "--out", pl, "--force"],
                "field": "budget"}

    def torchless(self) -> dict:
        rng, ck = self.rng, self.ck
        argv = rng.choice([["make-checkpoint", "--preset", "qwen3-14b", "--out", "x"], ["calibrate"],
                           ["validate", "--checkpoint", ck, "--plan", "stream"]])
        return {"argv": argv, "field": "torch", "no_torch": True}

    def misc(self) -> dict:
        rng = self.rng
        kind = rng.choice(["hw", "hw_action", "dtype", "policy", "objective", "export", "command", "model", "empty"])
        # a value starting with '-' is an option to argparse, so the random name starts with a letter
        spec = {"hw": (["hw", "show", rng.choice(["nope", "", "h100x", "x" + _rand_text(rng)])], "name"),
                "hw_action": (["hw", rng.choice(["delete", "", "LIST"])], "action"),
                "dtype": (["info", "qwen3-14b", "--dtype", rng.choice(["fp5x", "0", "33", "nan", "inf", "-4", ""])],
                          "dtype"),
                "policy": (["simulate", "qwen3-14b", "--policy", rng.choice(["vllm", "", "AIRLLM", "stream "])],
                           "policy"),
                "objective": (["plan", "qwen3-14b", "--objective", "fastest"], "objective"),
                "export": (["plan", "qwen3-14b", "--export", "vllm"], "export"),
                "command": ([rng.choice(["frobnicate", "", "--version-x"])], "command"),
                "model": (["info", rng.choice(["", "qwen3-15b", "nodir/", "x.json", "\u00e9"])], "model"),
                "empty": (rng.choice([["simulate", "qwen3-14b", "--plan", ""], ["simulate", "qwen3-14b", "--trace", ""],
                                      ["plan", "qwen3-14b", "--out", ""], ["info", "qwen3-14b", "--machine", ""],
                                      ["validate", "--checkpoint", "nodir", "--plan", "stream", "--store", ""]]), "")}[kind]
        field = spec[1]
        if kind == "model" and spec[0][1] == "x.json":
            field = "x.json"
        return {"argv": spec[0], "field": field}


def gen_cases(n: int, rng: random.Random, inp: dict[str, Path]) -> list[dict]:
    """n cases: {'category', 'argv', 'files' (name -> bytes, written in the case folder), 'field'}."""
    g = _Generators(rng, inp)
    gens = [g.misc, g.size, g.above_hardware, g.count, g.real, g.vary, g.config_field, g.config_file, g.plan_field,
            g.plan_file, g.profile_field, g.safetensors, g.store, g.paths, g.infeasible, g.torchless,
            *generators(rng, inp)]
    cases = []
    for i in range(n):
        gen = gens[i % len(gens)]
        case = gen()
        case["category"] = gen.__name__
        case.setdefault("files", {})
        cases.append(case)
    return cases


def _child(case: dict, folder: Path, log: Path) -> None:
    """Runs in the forked child: limits, files, then the CLI in-process; never returns."""
    try:
        os.chdir(folder)
        status = Path("/proc/self/status").read_text()
        vm = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmSize:"))) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + 4 * 2**30, vm + 4 * 2**30))
        out = os.open(log / "out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err = os.open(log / "err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdout = os.fdopen(1, "w", closefd=False)
        sys.stderr = os.fdopen(2, "w", closefd=False)
        os.environ["OFFLOADSIM_DEBUG"] = "1"
        if case.get("no_torch"):
            import importlib.util
            real = importlib.util.find_spec
            importlib.util.find_spec = lambda name, *a: None if name == "torch" else real(name, *a)
        from offloadsim.cli import main
        rc = main(case["argv"])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc if isinstance(rc, int) else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def _prepare(case: dict, folder: Path) -> None:
    folder.mkdir(parents=True)
    for name, data in case["files"].items():
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    special = case.get("special")
    if special == "model_fifo":
        os.mkfifo(folder / "fifo.json")
    elif special == "model_loop":
        os.symlink("loop.json", folder / "loop.json")
    elif special in ("model_dir_json", "machine_dir"):
        (folder / "dir.json").mkdir()


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_cases(cases: list[dict], work: Path, inputs_dir: Path, jobs: int) -> list[dict]:
    results: list[dict] = [None] * len(cases)  # type: ignore[list-item]
    pending = list(range(len(cases)))
    running: dict[int, tuple[int, float, Path, Path, dict]] = {}
    base_rss = _rss_bytes()
    input_snap = snapshot(inputs_dir)
    while pending or running:
        while pending and len(running) < jobs:
            i = pending.pop(0)
            folder, log = work / f"case{i}", work / f"log{i}"
            _prepare(cases[i], folder)
            log.mkdir()
            before = snapshot(folder)
            pid = os.fork()
            if pid == 0:
                _child(cases[i], folder, log)
            running[pid] = (i, time.perf_counter(), folder, log, before)
        done_any = False
        for pid, (i, t0, folder, log, before) in list(running.items()):
            got, status, usage = os.wait4(pid, os.WNOHANG)
            secs = time.perf_counter() - t0
            if got == 0 and secs <= TIMEOUT_S:
                continue
            hung = got == 0
            if hung:
                os.kill(pid, signal.SIGKILL)
                _, status, usage = os.wait4(pid, 0)
            done_any = True
            del running[pid]
            rc = os.waitstatus_to_exitcode(status)
            err = (log / "err").read_text(errors="replace")
            grew = usage.ru_maxrss * 1024 - base_rss
            results[i] = {"i": i, "category": cases[i]["category"], "command": cases[i]["argv"][0],
                          "argv": cases[i]["argv"], "field": cases[i]["field"], "rc": rc, "seconds": round(secs, 3),
                          "rss_growth_bytes": grew, "hung": hung, "stderr": err[-600:],
                          "expect": list(cases[i].get("expect", (2,))),
                          "answer": answer_problems(cases[i]["argv"], (log / "out").read_text(errors="replace"))
                          if rc == 0 else [], "changed": snapshot(folder) != before}
            shutil.rmtree(folder, ignore_errors=True)
        if not done_any:
            time.sleep(0.002)
    if snapshot(inputs_dir) != input_snap:
        results.append({"i": -1, "category": "inputs", "changed": True, "rc": 2, "hung": False, "stderr": "",
                        "rss_growth_bytes": 0, "field": "", "command": "", "argv": [], "seconds": 0})
    return results


def classify(r: dict) -> list[str]:
    err = r["stderr"]
    out = []
    if "Traceback" in err or (r["rc"] < 0 and not r["hung"]):
        out.append("traceback")
    if r["hung"]:
        out.append("hang")
    if r["rss_growth_bytes"] > MEMORY_BYTES or "needs more memory than this machine has" in err:
        out.append("memory")
    if r["rc"] not in r.get("expect", [2]):
        out.append("wrong_exit_code")
    if r["changed"]:
        out.append("file_changed")
    out += r.get("answer", [])
    if not out and r["rc"] == 2 and (err.count("\n") != 1 or not err.startswith("offloadsim: error: ")
                                      or r["field"].lower() not in err.lower()):
        out.append("poor_message")
    return out or ["correct"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--part", default="1/1", help="K/N: run the K-th of N interleaved parts of the cases")
    ap.add_argument("--out", default=str(ROOT / "lab" / "data" / "fuzz.json"))
    args = ap.parse_args(argv)
    import torch  # noqa: F401  (imported once in the parent: children fork with it loaded)
    from offloadsim.cli import build_parser
    build_parser()  # imports every command module once, before the forks

    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="offloadsim-fuzz-") as tmp:
        inputs = hostile_inputs(make_inputs(Path(tmp) / "inputs"))
        cases = gen_cases(args.cases, rng, inputs)
        k, n = (int(x) for x in args.part.split("/"))
        cases = [c for i, c in enumerate(cases) if i % n == k - 1]  # every n-th case: each part holds every class
        work = Path(tmp) / "work"
        work.mkdir()
        results = run_cases(cases, work, inputs["dir"], args.jobs)
    classes = Counter(c for r in results for c in classify(r))
    by_cat: dict[str, Counter] = {}
    for r in results:
        by_cat.setdefault(r["category"], Counter()).update(classify(r))
    bad = [dict(r, classes=classify(r)) for r in results if classify(r) != ["correct"]]
    report = {"cases": len(cases), "commands": sorted({r["command"] for r in results if r["command"]}),
              "seconds": round(time.perf_counter() - t0, 1), "seed": args.seed, "jobs": args.jobs, "part": args.part,
              "limits": {"timeout_s": TIMEOUT_S, "memory_bytes": MEMORY_BYTES},
              "classes": {k: classes.get(k, 0) for k in ("correct", "traceback", "hang", "memory", "wrong_exit_code",
                                                          "file_changed", "poor_message", "invalid_json",
                                                          "nonfinite_printed", "control_chars")},
              "by_category": {k: dict(v) for k, v in sorted(by_cat.items())},
              "slowest_s": max(r["seconds"] for r in results),
              "largest_rss_growth_bytes": max(r["rss_growth_bytes"] for r in results),
              "failures": bad[:60]}
    out = Path(args.out)
    tmp_out = out.with_name(f".{out.name}.tmp")
    tmp_out.write_text(json.dumps(report, indent=1))
    os.replace(tmp_out, out)
    print(json.dumps({k: report[k] for k in ("cases", "seconds", "classes", "slowest_s")}, indent=1))
    for r in bad[:15]:
        print(r["classes"], r["argv"], r["stderr"].strip()[-300:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
