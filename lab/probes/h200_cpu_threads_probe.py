"""Does transformers' CPU decode slow down when it takes every core? (lab/journal/peers.md, twenty-third session)

Accelerate's CPU-executed maps (transformers with every module on "cpu") ran 20-32% slower than offloadsim's CPU grid
predicts in peers calls G and H, and 1-12% faster in calls B-D. The grid is timed by offloadsim's engine on all cores
but two (validate/engine.py RESERVED_CORES); transformers takes torch's default, every core. On a lent virtual machine
a thread preempted by the host stalls every barrier of a parallel kernel, and the more of the cores a kernel takes,
the likelier. This probe decodes a random-weight checkpoint with transformers on the CPU at several thread counts,
interleaved over rounds (the host drifts), and times a 256 MiB bf16 matrix-vector product at the same counts.

    python3 lab/probes/h200_cpu_threads_probe.py --archs phi3-mini:8,qwen3-14b:6 --out $OUT/cpu-threads.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import time
from pathlib import Path

import torch

from validate.archs import arch_config
from lab.probes.h200_map_gemv_probe import gemv_gbps


def cpu_topology() -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    first = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in info.split("\n\n")[0].splitlines())}
    return {"logical": os.cpu_count(), "siblings": first.get("siblings"), "cores": first.get("cpu cores"),
            "model": first.get("model name"), "torch_default_threads": torch.get_num_threads()}


def decode_tpot(model, ids: torch.Tensor, new_tokens: int) -> float:
    """Mean time per token after the first, by a logits processor's stamps (lab/campaigns/h200_peers.py)."""
    from lab.campaigns.h200_peers import timed_generate
    with torch.no_grad():
        return timed_generate(model, ids, new_tokens, lambda: None)["time_per_token_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", default="phi3-mini:8,qwen3-14b:6")
    ap.add_argument("--threads", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--work", default="/tmp/offloadsim-threads")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM
    from validate.checkpoint import make_checkpoint
    n = os.cpu_count() or 4
    default = sorted({c for c in (n, n - 1, n - 2, n - 4, n // 2) if c > 0}, reverse=True)
    counts = [int(x) for x in a.threads.split(",") if x] or default
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "torch": torch.__version__,
           "cpu": cpu_topology(), "threads": counts, "gemv_256MiB_gbps": {}, "archs": []}
    w, x = torch.randn(32768, 4096, dtype=torch.bfloat16), torch.randn(1, 4096, dtype=torch.bfloat16)
    for arch_spec in a.archs.split(","):
        arch, cfg = arch_config(arch_spec)
        ckpt = Path(a.work) / arch
        shutil.rmtree(ckpt, ignore_errors=True)
        make_checkpoint(cfg, ckpt)
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16)  # on the CPU
        ids = torch.randint(0, cfg["vocab_size"], (1, 128), generator=torch.Generator().manual_seed(0))
        decode_tpot(model, ids, 3)  # warm-up
        entry = {"arch": arch_spec, "tpot_s": {str(c): [] for c in counts}}
        for _ in range(a.rounds):
            for c in counts:
                torch.set_num_threads(c)
                entry["tpot_s"][str(c)].append(decode_tpot(model, ids, a.new_tokens))
                out["gemv_256MiB_gbps"].setdefault(str(c), []).append(gemv_gbps(w, x))
        entry["median_tpot_s"] = {c: statistics.median(v) for c, v in entry["tpot_s"].items()}
        print(arch_spec, {c: round(v * 1e3, 1) for c, v in entry["median_tpot_s"].items()}, "ms a token", flush=True)
        out["archs"].append(entry)
        del model
        shutil.rmtree(ckpt, ignore_errors=True)
    out["median_gemv_gbps"] = {c: statistics.median(v) for c, v in out["gemv_256MiB_gbps"].items()}
    print("gemv", {c: round(v, 1) for c, v in out["median_gemv_gbps"].items()}, "GB/s", flush=True)
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(a.out)


if __name__ == "__main__":
    main()
