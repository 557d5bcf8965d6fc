"""Where Accelerate's disk offload spends its time, per tensor (lab/journal/peers.md, twenty-seventh session).

Peers call P: SmolLM-135M all on Accelerate's disk ran 0.218 s a token over the same model in RAM, where offloadsim
priced 0.108 s (calibrate's `disk_tensor_s`, the bare safetensors open of a tensor, plus its header entries and the
pages at the host's map speed). This probe takes the difference apart on a model's own checkpoint:

1. in place: the model loaded by transformers with every decoder on "cpu" (RAM) and on "disk", each computed on
   the CPU, and with the decoders on disk and the rest on the GPU (GPU execution); a generation timed with
   Accelerate's hook phases summed: `OffloadedWeightsLoader.__getitem__` (safe_open + get_tensor), the
   `set_module_tensor_to_device` calls of the pre-hook (to the execution device) and of the post-hook (to meta,
   which releases the map), and the forwards between them;
2. bare, over the checkpoint's own tensors, each variant less the same on a resident copy of the tensor: the open
   and get alone; then with the pages read by a sum on all threads (calibrate's method), on one thread, by a GEMV;
   then copied to the GPU; per tensor, with its size, so the cost can be fitted as a line in the bytes;
3. calibrate's own `offload_open` for the record.

    python3 lab/probes/h200_accel_disk_probe.py --archs smollm-135m:30,qwen3-0.6b:8,fa-20-4:4 \\
        --work /tmp/osp --out $OUT/accel-disk.json
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import shutil
import statistics
import time
from pathlib import Path

import torch

from validate.archs import arch_config
from lab.campaigns.h200_matrix import TINY, log
from lab.campaigns.h200_peers import RAM, prompt, timed_generate
from hwmodels.units import GiB


class HookPhases:
    """Accelerate's per-forward work, wall time summed by phase (two clock reads a call)."""

    def __init__(self):
        self.sums: dict[str, list[float]] = {}

    def add(self, name: str, dt: float) -> None:
        rec = self.sums.setdefault(name, [0.0, 0])
        rec[0] += dt
        rec[1] += 1

    def install(self) -> None:
        import accelerate.hooks as hooks
        from accelerate.utils.offload import OffloadedWeightsLoader
        get, setter = OffloadedWeightsLoader.__getitem__, hooks.set_module_tensor_to_device
        pre, post = hooks.AlignDevicesHook.pre_forward, hooks.AlignDevicesHook.post_forward

        def timed_get(obj, key):
            t = time.perf_counter()
            try:
                return get(obj, key)
            finally:
                if key not in obj.state_dict:
                    self.add("getitem_disk", time.perf_counter() - t)

        def timed_set(module, name, device, *a, **k):
            t = time.perf_counter()
            try:
                return setter(module, name, device, *a, **k)
            finally:
                self.add("set_to_meta" if str(device) == "meta" else "set_to_device", time.perf_counter() - t)

        def wrap(fn, label):
            def timed(*a, **k):
                t = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    self.add(label, time.perf_counter() - t)
            return timed

        OffloadedWeightsLoader.__getitem__ = timed_get
        hooks.set_module_tensor_to_device = timed_set
        hooks.AlignDevicesHook.pre_forward = wrap(pre, "pre_forward")
        hooks.AlignDevicesHook.post_forward = wrap(post, "post_forward")

    def take(self) -> dict:
        out = {k: {"total_s": v[0], "calls": v[1]} for k, v in self.sums.items()}
        self.sums = {}
        return out


def device_maps(config: dict, dev: str) -> dict[str, dict]:
    """Every decoder on the CPU, on disk (CPU execution), and on disk with everything else on the GPU."""
    n = config["num_hidden_layers"]
    layers = {f"model.layers.{i}": None for i in range(n)}
    rest = ("model.embed_tokens", "model.norm", "model.rotary_emb", "lm_head")
    maps = {"ram, cpu": {**{k: "cpu" for k in rest}, **{k: "cpu" for k in layers}},
            "disk, cpu": {**{k: "cpu" for k in rest}, **{k: "disk" for k in layers}}}
    if dev == "cuda":
        maps["ram, gpu"] = {**{k: 0 for k in rest}, **{k: "cpu" for k in layers}}
        maps["disk, gpu"] = {**{k: 0 for k in rest}, **{k: "disk" for k in layers}}
    return maps


def in_place(ckpt: Path, work: Path, config: dict, dev: str, sync, phases: HookPhases, rounds: int) -> list[dict]:
    from transformers import AutoModelForCausalLM
    out = []
    for r in range(rounds):
        for label, dmap in device_maps(config, dev).items():
            off = work / "offload"
            shutil.rmtree(off, ignore_errors=True)
            model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16, device_map=dmap,
                                                         max_memory={0: 100 * GiB, "cpu": RAM} if dev == "cuda"
                                                         else {"cpu": RAM}, offload_folder=str(off))
            if label == "ram, cpu":  # the same RAM weights behind Accelerate's offload hooks: their work alone
                variants = [("ram, cpu", model), ("ram hooked, cpu", None)]
            else:
                variants = [(label, model)]
            exec_dev = "cuda" if label.endswith("gpu") else "cpu"
            ids = prompt(config["vocab_size"], 1, 16, exec_dev)
            new = 9
            for name, m in variants:
                if m is None:
                    from accelerate import cpu_offload
                    m = cpu_offload(model, execution_device=torch.device("cpu"))
                with torch.no_grad():
                    timed_generate(m, ids, new, sync)
                    phases.take()
                    res = timed_generate(m, ids, new, sync)
                res.update(round=r, map=name, forwards=new, phases=phases.take())
                out.append(res)
                log(name, f"round {r}: {res['time_per_token_s'] * 1e3:.1f} ms a token")
            del model
            gc.collect()
            if dev == "cuda":
                torch.cuda.empty_cache()
            shutil.rmtree(off, ignore_errors=True)
    return out


def bare(ckpt: Path, dev: str, passes: int = 3) -> list[dict]:
    """Per tensor of the checkpoint: seconds of each variant less the same on a resident copy, median of passes."""
    from safetensors import safe_open
    files = sorted(ckpt.glob("*.safetensors"))
    rows = []
    for path in files:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            names = list(f.keys())
            resident = {k: f.get_tensor(k).clone() for k in names}
        for name in names:
            res = resident[name]
            x = torch.ones(1, res.shape[-1], dtype=res.dtype) if res.dim() == 2 else None

            def opened():
                with safe_open(str(path), framework="pt", device="cpu") as f:
                    return f.get_tensor(name)

            def cpu_sum(w):
                float(w.sum())

            def one_thread_sum(w):
                n = torch.get_num_threads()
                torch.set_num_threads(1)
                try:
                    float(w.sum())
                finally:
                    torch.set_num_threads(n)

            def gemv(w):
                if x is not None:
                    float(torch.nn.functional.linear(x, w).sum())

            def to_gpu(w):
                w.to(dev)
                if dev == "cuda":
                    torch.cuda.synchronize()

            variants = {"open": None, "sum": cpu_sum, "sum_1thread": one_thread_sum, "gemv": gemv}
            if dev == "cuda":
                variants["to_gpu"] = to_gpu
            row = {"file": path.name, "tensor": name, "nbytes": res.numel() * res.element_size(),
                   "shape": list(res.shape)}
            for label, use in variants.items():
                times = []
                for _ in range(passes):
                    t = time.perf_counter()
                    w = opened()
                    if use is not None:
                        use(w)
                    del w
                    mid = time.perf_counter()
                    if use is not None:
                        use(res)
                    times.append((mid - t) - (time.perf_counter() - mid))
                row[f"{label}_s"] = statistics.median(times)
            rows.append(row)
        del resident
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--archs", default="smollm-135m:30", help="NAME[:LAYERS],... (validate/archs.py)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the in-place maps")
    ap.add_argument("--work", type=Path, default=Path("/tmp/osp"))
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    from sim.engines.accelerate.disk_cost import offload_open
    from validate.checkpoint import make_checkpoint
    import accelerate
    import safetensors
    import transformers
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    phases = HookPhases()
    phases.install()
    out = {"method": __doc__, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "host": platform.node(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "gpu": torch.cuda.get_device_name() if dev == "cuda" else None,
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "accelerate": accelerate.__version__, "safetensors": safetensors.__version__},
           "archs": []}
    a.work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    out["offload_open"] = dict(zip(("tensor_s", "header_entry_s"), offload_open(a.work)))
    log("offload_open", out["offload_open"], f"{time.perf_counter() - t:.0f}s")
    for spec in a.archs.split(","):
        name, cfg = arch_config(spec, {"tiny": ("llama-3.1-8b", TINY)})  # tiny: a smoke test
        base = a.work / name
        shutil.rmtree(base, ignore_errors=True)
        ckpt = make_checkpoint(cfg, base / "ckpt", device=dev)
        entry = {"arch": spec, "config": cfg}
        entry["in_place"] = in_place(ckpt, base, cfg, dev, sync, phases, a.rounds)
        entry["bare"] = bare(ckpt, dev)
        log(spec, "bare", len(entry["bare"]), "tensors")
        out["archs"].append(entry)
        tmp = a.out.with_suffix(".partial")
        tmp.write_text(json.dumps(out, indent=1, default=str))
        tmp.replace(a.out)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
