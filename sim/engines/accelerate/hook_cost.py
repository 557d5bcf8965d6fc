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

The hooks are Python work on the calling thread, so each run is timed in that thread's CPU time (time.thread_time)
with torch on one thread: time spent waiting for a core on a loaded host is not counted, and no torch worker spins
waiting for a descheduled sibling. Each run's fastest round is taken (load only ever adds time); a difference that
is still not positive is refused with the rounds, never clamped to zero (`hook_cost_per_token`).
"""
from __future__ import annotations

import contextlib
import importlib.util
import shutil
import tempfile
import time
from pathlib import Path

# SmolLM-135M's layer (0.2-1.8 MB a matrix), six of them, a small vocabulary: what the hooks cost on its own is the
# same at any width, but the pages of a freshly mapped tensor, faulted in by the forward and released by the post
# hook, are not: at a width of 64 the 2-core development machine measured 0.13 ms a module, at 576 0.19-0.25 (the
# H200 host: 0.21 at 64, 0.30 at 576, 0.31-0.41 in place for SmolLM-135M, Qwen3-0.6B and a 2560-wide Llama;
# lab/journal/peers.md)
SMALL_LLAMA = dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=6,
                   num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=256,
                   max_position_embeddings=64)


def hooked_modules(model) -> int:
    """The modules that hold parameters of their own: those Accelerate hooks to offload."""
    return sum(1 for m in model.modules() if next(m.parameters(recurse=False), None) is not None)


@contextlib.contextmanager
def timed_reads(total: list[float]):
    """Adds to total[0] the CPU seconds this thread spends in Accelerate's offload map reads while inside."""
    from accelerate.utils.offload import OffloadedWeightsLoader
    get = OffloadedWeightsLoader.__getitem__

    def timed(obj, key):
        t = time.thread_time()
        try:
            return get(obj, key)
        finally:
            total[0] += time.thread_time() - t
    OffloadedWeightsLoader.__getitem__ = timed
    try:
        yield
    finally:
        OffloadedWeightsLoader.__getitem__ = get


@contextlib.contextmanager
def one_torch_thread():
    """torch's intra-op threads set to one while inside, restored after."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def hook_cost_per_token(rounds_s: list[tuple[float, float, float]]) -> dict:
    """The hooks' seconds per token from rounds of (RAM run, disk run, reads inside the disk run), seconds a token.

    The fastest RAM run and the fastest disk run net of its reads: {'hook_s' (their difference), 'ram_s', 'disk_s',
    'reads_s' (those runs' own, so disk_s - reads_s - ram_s == hook_s)}; {'error': why} when the difference is not
    positive (the rounds' noise exceeds what the hooks cost), which a caller records instead of a value."""
    if not rounds_s:
        raise ValueError("hook_cost_per_token needs at least one round")
    ram_s = min(r for r, _, _ in rounds_s)
    _, disk_s, reads_s = min(rounds_s, key=lambda row: row[1] - row[2])
    hook_s = disk_s - reads_s - ram_s
    if not hook_s > 0:
        return {"error": f"the disk run net of its reads ({(disk_s - reads_s) * 1e3:.3f} ms a token) was not slower "
                         f"than the RAM run ({ram_s * 1e3:.3f} ms) in {len(rounds_s)} rounds: too noisy to measure "
                         "Accelerate's hook cost; the preset's value stays"}
    return {"hook_s": hook_s, "ram_s": ram_s, "disk_s": disk_s, "reads_s": reads_s}


def hook_module_s(folder: Path | None = None, rounds: int = 6, tokens: int = 8) -> dict:
    """{'hook_module_s', 'modules', 'ram_s', 'disk_s', 'reads_s' (CPU seconds a token, see hook_cost_per_token),
    'rounds', 'rounds_s'}, or {'error': why} where accelerate or transformers is not installed or the rounds were too
    noisy (the profile then keeps the preset's value)."""
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
                t = time.thread_time()
                model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
                return (time.thread_time() - t) / tokens
        with torch.no_grad(), one_torch_thread():
            reads = [0.0]
            per_token(ram, reads), per_token(disk, reads)  # warm-up
            rows = []
            for _ in range(rounds):
                r = per_token(ram, reads)
                d = per_token(disk, reads)
                rows.append((r, d, reads[0] / tokens))
        est = hook_cost_per_token(rows)
        found = {"modules": modules, "rounds": rounds, "rounds_s": [list(row) for row in rows]}
        if "error" in est:
            return {**est, **found}
        return {"hook_module_s": est["hook_s"] / modules, **found,
                "ram_s": est["ram_s"], "disk_s": est["disk_s"], "reads_s": est["reads_s"]}
    finally:
        shutil.rmtree(work, ignore_errors=True)
