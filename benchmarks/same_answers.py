"""Same inputs, same answers: every plan, prediction and export of a fixed set of cases, through the command line.

Runs `offloadsim` in-process over a matrix of (model, machine, budget, workload, engine or policy) cases and writes
one JSON line per case: the arguments, the exit code and the command's JSON output with its wall-clock fields
removed. Two such files, written before and after a change to the code, compare equal when no answer moved.

    python benchmarks/same_answers.py --out /tmp/after.jsonl             # write the answers of the code of today
    python benchmarks/same_answers.py --compare lab/data/same-answers/before.jsonl /tmp/after.jsonl
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import itertools
import json
import os
import sys
import time
from pathlib import Path

WALL_CLOCK_KEYS = {"planning_s", "stopped", "elapsed_s", "wall_s"}  # differ with the machine's load, not the inputs

BULKY_KEYS = {"layers"}  # per-unit lists: kept as a digest

MACHINES = ("rtx3080-laptop", "desktop-4090", "xeon-4090", "t4-cloud", "h200-testbox")
POLICIES = ("stream", "resident", "airllm", "accelerate", "llamacpp", "airllm-ideal", "accelerate-ideal",
            "llamacpp-ideal")
ENGINES = ("offloadsim", "accelerate", "llamacpp", "airllm")


def cases() -> list[list[str]]:
    """The argument lists, in a fixed order (at least 200)."""
    out: list[list[str]] = []
    # simulate: every policy of several models on every machine, two workloads
    sim_models = (("qwen3-14b", []), ("llama-3.1-8b", []), ("mixtral-8x7b", ["--dtype", "q4_k_m"]),
                  ("llama-3.1-70b", ["--dtype", "q4_k_m"]))
    for (model, extra), machine, policy in itertools.product(sim_models, MACHINES, POLICIES):
        wl = ["--batch", "1", "--prompt-tokens", "128", "--new-tokens", "4"] if policy != "stream" else \
            ["--batch", "4", "--prompt-tokens", "512", "--new-tokens", "6", "--warm"]
        out.append(["simulate", model, *extra, "--machine", machine, "--policy", policy, *wl, "--json"])
    # simulate with budgets
    for model, vram, ram in (("qwen3-14b", "4GiB", "16GiB"), ("llama-3.1-8b", "6GiB", "12GiB"),
                             ("mixtral-8x7b", "10GiB", "40GiB")):
        for policy in ("stream", "accelerate", "llamacpp", "airllm"):
            out.append(["simulate", model, "--machine", "desktop-4090", "--policy", policy, "--vram", vram,
                        "--ram-budget", ram, "--new-tokens", "5", "--json"])
    # plan: every engine, budgets, workloads, exports
    plan_cases = (("qwen3-14b", "rtx3080-laptop", "4GiB", []), ("qwen3-14b", "rtx3080-laptop", "6GiB", ["--warm"]),
                  ("llama-3.1-8b", "t4-cloud", "6GiB", ["--batch", "4"]),
                  ("llama-3.1-8b", "desktop-4090", "4GiB", ["--prompt-tokens", "1024", "--new-tokens", "8"]),
                  ("mixtral-8x7b", "desktop-4090", "12GiB", ["--dtype", "q4_k_m"]),
                  ("qwen3-14b", "h200-testbox", "8GiB", ["--batch", "8"]),
                  ("llama-3.1-70b", "xeon-4090", "20GiB", ["--dtype", "q4_k_m", "--new-tokens", "4"]))
    for (model, machine, vram, extra), engine in itertools.product(plan_cases, ENGINES):
        args = ["plan", model, "--machine", machine, "--vram", vram, *extra, "--engine", engine, "--json"]
        if engine in ("accelerate", "llamacpp"):
            args += ["--export", engine]
        out.append(args)
    for model, machine, vram in (("qwen3-14b", "rtx3080-laptop", "4GiB"), ("llama-3.1-8b", "t4-cloud", "5GiB")):
        for export in ("accelerate", "llamacpp"):
            out.append(["plan", model, "--machine", machine, "--vram", vram, "--export", export, "--objective",
                        "total", "--json"])
    # info and whatif
    for model, machine in itertools.product(("qwen3-14b", "mixtral-8x7b", "deepseek-r1"), MACHINES):
        out.append(["info", model, "--machine", machine, "--json"])
    out.append(["whatif", "qwen3-14b", "--machine", "rtx3080-laptop", "--vary", "vram=4GiB,7GiB", "--vary",
                "storage=sata,nvme-gen5", "--workers", "1", "--json"])
    return out


def answer(argv: list[str]) -> dict:
    """Run one command line in-process; its exit code and JSON output (wall-clock fields removed)."""
    from offloadsim.cli import main

    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    text = buf.getvalue()
    try:
        data = _strip(json.loads(text))
    except ValueError:
        data = text
    return _compact({"argv": argv, "rc": rc, "output": data, "stderr": err.getvalue().strip()})


def _compact(rec: dict) -> dict:
    """The record with its bulky per-layer lists replaced by their digest (the file stays a few MB)."""
    out = rec["output"]
    if isinstance(out, dict):
        rec["output"] = {k: {"sha256": hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest(),
                             "items": len(v)} if k in BULKY_KEYS and isinstance(v, list) else v
                         for k, v in out.items()}
    return rec


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in WALL_CLOCK_KEYS}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def digest(rec: dict) -> str:
    return hashlib.sha256(json.dumps(rec, sort_keys=True).encode()).hexdigest()


def compare(before: Path, after: Path) -> int:
    a = [json.loads(line) for line in before.read_text().splitlines() if line]
    b = [json.loads(line) for line in after.read_text().splitlines() if line]
    if [r["argv"] for r in a] != [r["argv"] for r in b]:
        print("the two files hold different cases; write both with the same version of this script.")
        return 2
    moved = [(r, s) for r, s in zip(a, b) if digest(r) != digest(s)]
    for r, s in moved:
        print("moved:", " ".join(r["argv"]))
        _diff(r, s, "")
    ok = sum(r["rc"] == 0 for r in a)
    print(f"{len(a) - len(moved)} of {len(a)} cases identical ({ok} answered, {len(a) - ok} refused with a reason)")
    return 1 if moved else 0


def _diff(x, y, path: str, shown: list | None = None) -> None:
    shown = [] if shown is None else shown
    if len(shown) >= 5:
        return
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            _diff(x.get(k), y.get(k), f"{path}.{k}", shown)
    elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for i, (u, v) in enumerate(zip(x, y)):
            _diff(u, v, f"{path}[{i}]", shown)
    elif x != y:
        shown.append(path)
        print(f"  {path}: {str(x)[:120]} -> {str(y)[:120]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the answers here (JSON lines)")
    ap.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        ap.error("give --out FILE or --compare BEFORE AFTER")
    os.environ["TQDM_DISABLE"] = "1"  # progress bars appear on a loaded machine only: not an answer
    t0 = time.perf_counter()
    todo = cases()
    tmp = args.out.with_name(args.out.name + ".partial")
    with tmp.open("w") as f:
        for i, argv in enumerate(todo):
            f.write(json.dumps(answer(argv), sort_keys=True) + "\n")
            print(f"\r{i + 1}/{len(todo)} cases", end="", file=sys.stderr, flush=True)
    tmp.replace(args.out)
    print(f"\nwrote {len(todo)} cases to {args.out} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
