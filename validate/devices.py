"""The engine over several GPUs and with the KV cache in host memory: which device each unit runs on, the
per-device step state handed from GPU to GPU, and a layer's cache kept in RAM and copied around its compute.

Several GPUs run a plan's layer split as a pipeline of one micro-batch (sim/run/placed.py): each GPU keeps its
resident units, its VRAM slots, its copy stream and its own static step tensors (so its units' CUDA graphs capture
over them); where the compute moves to the next GPU the hidden state and the rotary tables are copied there. Without
CUDA the "devices" are all the CPU (the logic runs on two fake devices).
"""
from __future__ import annotations

import torch

from hwmodels.units import InputError
from validate import model as M


def plan_devices(plan, device: torch.device) -> list[torch.device]:
    """The torch device of each GPU index of the plan: `device` alone for one GPU; cuda:0..N-1 for N (refused
    when fewer are visible); N times the CPU without CUDA."""
    n = plan.gpu_count
    if n == 1:
        return [device]
    if device.type != "cuda":
        return [device] * n
    if torch.cuda.device_count() < n:
        raise InputError(f"plan: it splits layers over {n} GPUs but this machine shows {torch.cuda.device_count()}; "
                         "run it where that many GPUs are visible (CUDA_VISIBLE_DEVICES).")
    return [torch.device("cuda", g) for g in range(n)]


def synchronize(devices: list[torch.device]) -> None:
    """Wait for every GPU's work (nothing without CUDA)."""
    for d in devices:
        if d.type == "cuda":
            torch.cuda.synchronize(d)


def unit_gpus(shape, plan) -> dict[str, int]:
    """Unit name -> the GPU index it runs on (0 without a split)."""
    return {u.name: (plan.devices[k] if plan.devices is not None else 0) for k, u in enumerate(shape.units)}


def hand_off(src, dst) -> None:
    """The step's hidden state and rotary tables from one GPU's step tensors to the next's (the activations'
    copy, sim.run.placed), ordered after the source's work on its stream."""
    if src is dst:
        return
    dst.x.copy_(src.x)
    dst.cos.copy_(src.cos)
    dst.sin.copy_(src.sin)


def move_kv(stage: torch.Tensor, src: tuple, dst: tuple, span: slice) -> None:
    """Positions `span` of a CPU-computed layer's K and V between its CPU cache and a GPU copy (a step offloaded to
    the GPU), each tensor through the engine's pinned buffer `stage`: a host copy and a pinned copy at the link's speed
    (a pageable copy into a fresh tensor ran at 1.3 GB/s, lab/journal/validation.md). Both copies are synchronous, so
    one buffer serves."""
    for a, b in zip(src, dst):
        part = a[:, :, span]
        buf = stage[:part.numel() * part.element_size()].view(part.dtype).view(part.shape)
        buf.copy_(part)
        b[:, :, span].copy_(buf)


class HostKV:
    """A GPU layer's KV cache kept in host memory (pinned or pageable), laid out position-major
    ([max_len, batch, kv_heads, head_dim] for K and V) so that the positions written so far are one contiguous block:
    before the layer they are copied into the device's cache (`dev`, shared by that GPU's host-KV layers, through a
    shared staging buffer), after it the step's new positions go back."""

    def __init__(self, arch, batch: int, max_len: int, pinned: bool, dev: M.KVCache, stage: torch.Tensor):
        shape = (max_len, batch, arch.kv_heads, arch.head_dim)
        self.k = torch.zeros(shape, dtype=torch.bfloat16, pin_memory=pinned)
        self.v = torch.zeros(shape, dtype=torch.bfloat16, pin_memory=pinned)
        self.pinned, self.dev, self.stage = pinned, dev, stage

    def copy_in(self, start: int) -> None:
        """Positions 0..start-1 into the device cache."""
        if not start:
            return
        for host, dev in ((self.k, self.dev.k), (self.v, self.dev.v)):
            self.stage[:start].copy_(host[:start], non_blocking=self.pinned)
            dev[:, :, :start].copy_(self.stage[:start].permute(1, 2, 0, 3))

    def copy_back(self, start: int, n: int) -> None:
        """Positions start..start+n-1 of the device cache back to host memory."""
        for host, dev in ((self.k, self.dev.k), (self.v, self.dev.v)):
            host[start:start + n].copy_(dev[:, :, start:start + n].permute(2, 0, 1, 3), non_blocking=self.pinned)

    def zero_(self) -> None:
        for t in (self.k, self.v, self.dev.k, self.dev.v):
            t.zero_()


def make_caches(e, w, devices: list[torch.device], gpus: dict[str, int]) -> dict:
    """Each decoder's cache: on the CPU for a CPU-computed layer, in host memory for a GPU layer of a plan whose
    KV cache lives in RAM (HostKV, one device cache and staging buffer per GPU), else on its GPU."""
    max_len, home = w.prompt_tokens + w.new_tokens, e.plan.kv_home
    shared: dict[int, tuple] = {}
    out = {}
    for u in e.shape.units:
        if u.kind != "decoder":
            continue
        g = gpus[u.name]
        if e.tiers[u.name].compute == "cpu":
            out[u.name] = M.KVCache(e.arch, w.batch, max_len, "cpu", torch.bfloat16)
        elif home in ("pinned", "pageable"):
            if g not in shared:
                shared[g] = (M.KVCache(e.arch, w.batch, max_len, devices[g], torch.bfloat16),
                             torch.empty((max_len, w.batch, e.arch.kv_heads, e.arch.head_dim), dtype=torch.bfloat16,
                                         device=devices[g]))
            out[u.name] = HostKV(e.arch, w.batch, max_len, home == "pinned" and devices[g].type == "cuda", *shared[g])
        else:
            out[u.name] = M.KVCache(e.arch, w.batch, max_len, devices[g], torch.bfloat16)
    return out


class StepState:
    """The static tensors one phase computes through (prefill: the whole prompt; decode: one token at a position
    held on the device): token ids, positions, hidden state, rotary tables, logits and the chosen token. Every unit
    reads and writes them in place, so a CUDA graph captured over them serves every step of its phase."""

    def __init__(self, e, dev: torch.device, batch: int, tokens: int, decode: bool):
        a = e.arch
        self.decode = decode
        self.ids = torch.zeros((batch, tokens), dtype=torch.long, device=dev)
        self.positions = torch.arange(tokens, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.pos_cpu = torch.zeros(1, dtype=torch.long)
        self.x = torch.zeros((batch, tokens, a.hidden), dtype=torch.bfloat16, device=dev)
        self.cos = torch.zeros((tokens, a.head_dim), dtype=torch.bfloat16, device=dev)
        self.sin = torch.zeros_like(self.cos)
        self.logits = torch.zeros((batch, e.shape.vocab), dtype=torch.float32, device=dev)
        self.tok = torch.zeros(batch, dtype=torch.long, device=dev)
