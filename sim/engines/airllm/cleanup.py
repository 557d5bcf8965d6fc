"""What AirLLM pays after every module it streams, timed on this host (`calibrate --peer airllm` runs it as a
fresh process).

airllm 4.0 calls `utils.clean_memory` in the forward hook of each module: `gc.collect()`, `malloc_trim(0)`,
`torch.cuda.empty_cache()`. The full collection walks every object the interpreter tracks, and a process that has
imported torch, transformers and accelerate and built the model on the meta device (as AirLLM's `init_model` does)
tracks some 370-460 thousand: 0.19-0.25 s a module on the H200 test host, 0.3-0.4 s on a 2-core development
machine, the bulk of AirLLM's time per token (lab/campaigns/h200_peers.py times its steps, lab/journal/peers.md). So the cost is the host's speed at walking objects times the objects of such a process, and it is
timed in one: a fresh interpreter with those imports and the model, the median of `rounds` cleanups.
Run: python -m sim.engines.airllm.cleanup CONFIG.json  (prints {"cleanup_s": ..., "gc_objects": ...})
"""
from __future__ import annotations

import ctypes
import gc
import importlib
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def cleanup_once() -> float:
    import torch
    t = time.perf_counter()
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return time.perf_counter() - t


def measure(config: dict, rounds: int = 5) -> dict:
    """In this process: the imports and the meta-device model of AirLLM's process, then `rounds` cleanups."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    for name in ("accelerate", "airllm"):  # what AirLLM's process imports, where installed
        if importlib.util.find_spec(name):
            importlib.import_module(name)
    cfg = AutoConfig.for_model(**{k: v for k, v in config.items() if not k.startswith("_")})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    times = [cleanup_once() for _ in range(rounds)]
    out = {"cleanup_s": statistics.median(times), "rounds_s": times, "gc_objects": len(gc.get_objects())}
    del model
    return out


def module_cleanup(config: dict, folder: Path, timeout_s: float = 300.0) -> dict:
    """`measure` in a fresh interpreter, so that what the calling process holds does not count. If that interpreter
    fails (transformers missing, a config it cannot build), {'error': why}: the profile keeps the preset's cost."""
    path = Path(folder) / ".module-cleanup-config.json"
    path.write_text(json.dumps(config))
    try:
        res = subprocess.run([sys.executable, "-m", "sim.engines.airllm.cleanup", str(path)], capture_output=True,
                             text=True, timeout=timeout_s)
        if res.returncode != 0:
            return {"error": (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1][:300]}
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        path.unlink(missing_ok=True)


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(Path(sys.argv[1]).read_text()))))
