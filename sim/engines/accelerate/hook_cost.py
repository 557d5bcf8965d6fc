"""What Accelerate's hooks cost per module of a disk-offloaded layer, beyond reading its tensors (`calibrate --peer
accelerate`).

A decoder layer that transformers places on "disk" is dispatched by Accelerate with an `AlignDevicesHook` on every
module that holds parameters and on the layer's blocks (accelerate/hooks.py, attach_align_device_hook_on_blocks):
before each forward the first takes every tensor from the offload map (`OffloadedWeightsLoader.__getitem__`: a
safetensors open, priced apart by `disk_tensor_s`) and sets it on the execution device (`set_module_tensor_to_device`,
a new Parameter each time), after the forward sets it back on `meta`; the block hooks move the forward's arguments,
the KV cache among them. All of it is Python work per module and forward, whatever the tensors' sizes: on the H200
host 0.11-0.29 ms a module for the first alone (lab/probes/h200_accel_disk_probe.py, lab/data/peers/accel-disk.json),
as much as the open of a small tensor. Timed here as a run pays it: a small Llama (SMALL_LLAMA) saved as
safetensors, loaded by transformers with every decoder on "disk" and again all on "cpu", generations interleaved;
the disk run's time less the RAM run's, less the time spent inside the offload map's reads, per offloaded module and
token.
"""
from __future__ import annotations

import contextlib
import importlib.util
import shutil
import statistics
import tempfile
import time
from pathlib import Path

# SmolLM-135M's layer (0.2-1.8 MB a matrix), six of them, a small vocabulary: what the hooks cost on its own is the
# same at any width, but the pages of a freshly mapped tensor, faulted in by the forward and released by the post
# hook, are not: at a width of 64 the 2-core development machine measured 0.13 ms a module, at 576 0.19-0.25 (the
# H200 host: 0.21 at 64, 0.30 at 576, 0.31-0.41 in place for SmolLM-135M, Qwen3-0.6B and a 2560-wide Llama;
# lab/journal/peers.md, twenty-seventh session)
SMALL_LLAMA = dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=6,
                   num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=256,
                   max_position_embeddings=64)


def hooked_modules(model) -> int:
    """The modules that hold parameters of their own: those Accelerate hooks to offload."""
    return sum(1 for m in model.modules() if next(m.parameters(recurse=False), None) is not None)


@contextlib.contextmanager
def timed_reads(total: list[float]):
    """Adds to total[0] the seconds spent in Accelerate's offload map reads while inside."""
    from accelerate.utils.offload import OffloadedWeightsLoader
    get = OffloadedWeightsLoader.__getitem__

    def timed(obj, key):
        t = time.perf_counter()
        try:
            return get(obj, key)
        finally:
            total[0] += time.perf_counter() - t
    OffloadedWeightsLoader.__getitem__ = timed
    try:
        yield
    finally:
        OffloadedWeightsLoader.__getitem__ = get


def hook_module_s(folder: Path | None = None, rounds: int = 6, tokens: int = 8) -> dict:
    """{'hook_module_s', 'modules', 'ram_s', 'disk_s', 'reads_s' (a token each), 'rounds'}, or {'error': why} where
    accelerate or transformers is not installed (the profile then keeps the preset's value)."""
    missing = [n for n in ("accelerate", "transformers") if importlib.util.find_spec(n) is None]
    if missing:
        return {"error": f"{' and '.join(missing)} not installed: Accelerate's hook cost not measured"}
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    work = Path(tempfile.mkdtemp(prefix=".hook-cost-", dir=folder))
    try:
        cfg = AutoConfig.for_model(**SMALL_LLAMA)
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(work / "ckpt")
        layers = {f"model.layers.{i}": "disk" for i in range(cfg.num_hidden_layers)}
        rest = {k: "cpu" for k in ("model.embed_tokens", "model.rotary_emb", "model.norm", "lm_head")}
        load = dict(dtype=torch.bfloat16, offload_folder=str(work / "offload"))
        disk = AutoModelForCausalLM.from_pretrained(work / "ckpt", device_map={**rest, **layers}, **load)
        ram = AutoModelForCausalLM.from_pretrained(work / "ckpt", device_map="cpu", **load)
        modules = hooked_modules(disk.model.layers)
        ids = torch.ones(1, 1, dtype=torch.long)

        def per_token(model, reads: list[float]) -> float:
            reads[0] = 0.0
            with timed_reads(reads):
                t = time.perf_counter()
                model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
                return (time.perf_counter() - t) / tokens
        with torch.no_grad():
            reads = [0.0]
            per_token(ram, reads), per_token(disk, reads)  # warm-up
            rows = []
            for _ in range(rounds):
                r = per_token(ram, reads)
                d = per_token(disk, reads)
                rows.append((r, d, reads[0] / tokens))
        rest_s = statistics.median(d - r - g for r, d, g in rows)
        return {"hook_module_s": max(rest_s, 0.0) / modules, "modules": modules,
                "ram_s": statistics.median(r for r, _, _ in rows), "disk_s": statistics.median(d for _, d, _ in rows),
                "reads_s": statistics.median(g for _, _, g in rows), "rounds": rounds}
    finally:
        shutil.rmtree(work, ignore_errors=True)
