"""Limits on every count the CLI takes, checked before any allocation or long loop.

Each limit is either what the machine can hold (KV cache and activations within VRAM + RAM) or a sane maximum that
keeps a run under about 30 s and 2 GiB (the simulated items, the router's draws, the what-if grid).
Every check raises InputError with one sentence naming the field, the value and the fix.
"""
from __future__ import annotations

import os

from hwmodels.specs import MachineSpec
from hwmodels.units import GiB, InputError, check_count, check_real
from sim.costs.memory import activation_bytes, kv_cache_bytes
from sim.plan import Budgets, Workload
from sim.model.shapes import ModelShape

MAX_BATCH = 4096
MAX_PROMPT_TOKENS = 1_048_576
MAX_NEW_TOKENS = 8192
MAX_SEED = 2**32 - 1
MAX_EXPERT_SKEW = 10.0
MAX_ITEMS = 60_000              # simulated (step, unit) items of one SimPy run: ~10 s on one core
MAX_ROUTER_DRAWS = 50_000_000   # tokens x experts of one routing draw (8 bytes each)
MAX_SWEEP_COMBOS = 10_000_000  # combinations of one whatif: a results file of about 3 GB (200-300 bytes a row)
MAX_SWEEP_IN_MEMORY = 100_000  # rows whatif holds to print every one, monotone; beyond, --results FILE.jsonl
MAX_WORKERS = max(1, min(64, os.cpu_count() or 1))


def workload(args, warm: bool = False) -> Workload:
    """The request's counts from argparse, each within its sane maximum."""
    batch = check_count(args.batch, "batch", 1, MAX_BATCH)
    prompt = check_count(args.prompt_tokens, "prompt-tokens", 1, MAX_PROMPT_TOKENS)
    new = check_count(args.new_tokens, "new-tokens", 1, MAX_NEW_TOKENS)
    seed = check_count(getattr(args, "seed", 0), "seed", 0, MAX_SEED)
    skew = check_real(getattr(args, "expert_skew", 0.0), "expert-skew", 0.0, MAX_EXPERT_SKEW)
    context = getattr(args, "context", None)
    if context is not None:
        context = check_count(context, "context", prompt + new, MAX_PROMPT_TOKENS + MAX_NEW_TOKENS,
                              "the context holds the prompt and the new tokens")
    return Workload(batch=batch, prompt_tokens=prompt, new_tokens=new, warm=warm, expert_skew=skew, seed=seed,
                    context=context)


def schedule_items(model: ModelShape, w: Workload) -> int:
    """An upper bound on the (step, unit) items the schedule lays out for this request."""
    dense = sum(1 for u in model.units if u.expert is None)
    per_step = dense
    first = dense
    if model.is_moe:
        moe_blocks = len({u.block for u in model.units if u.expert is not None})
        per_step += moe_blocks * min(model.n_routed_experts, w.batch * model.experts_per_token)
        first += moe_blocks * min(model.n_routed_experts, w.batch * w.prompt_tokens * model.experts_per_token)
    return first + (w.new_tokens - 1) * per_step


def check_request(model: ModelShape, machine: MachineSpec, w: Workload, items: int = MAX_ITEMS) -> None:
    """Refuse a request the machine cannot hold or the simulator cannot run in reasonable time and memory."""
    need = kv_cache_bytes(model, w) + activation_bytes(model, w)
    room = machine.gpu.vram_bytes + machine.host_memory.capacity_bytes
    if need > room:
        raise InputError(f"batch: {w.batch} sequences of {w.prompt_tokens} + {w.new_tokens} tokens need "
                         f"{need / GiB:.1f} GiB of KV cache and activations, more than the {room / GiB:.1f} GiB of "
                         f"VRAM and RAM on {machine.name}; lower --batch, --prompt-tokens or --new-tokens.")
    check_work(model, w, items)


def check_work(model: ModelShape, w: Workload, items: int = MAX_ITEMS) -> None:
    """Refuse a request the simulator cannot run in reasonable time and memory, whatever the machine."""
    if model.is_moe and w.batch * w.prompt_tokens * model.n_routed_experts > MAX_ROUTER_DRAWS:
        raise InputError(f"prompt-tokens: routing {w.batch} x {w.prompt_tokens} prompt tokens over "
                         f"{model.n_routed_experts} experts needs more than {MAX_ROUTER_DRAWS:,} draws; lower "
                         "--batch or --prompt-tokens.")
    n = schedule_items(model, w)
    if n > items:
        raise InputError(f"new-tokens: {w.new_tokens} tokens of {model.name} lay out about {n:,} simulated loads, "
                         f"more than the {items:,} one run allows; lower --new-tokens (the time per token settles "
                         "after a few tokens).")


def budgets(args, machine: MachineSpec) -> Budgets:
    """--vram, --ram-budget, --pinned parsed, each within check_size's bounds, and refused above the machine's
    hardware (every command with budgets reads them here)."""
    from hwmodels.units import check_size, parse_bytes

    def size(flag: str):
        text = getattr(args, flag.replace("-", "_"), None)
        return None if text is None else check_size(parse_bytes(text, flag), flag, text)
    vram, ram, pinned = size("vram"), size("ram-budget"), size("pinned")
    gpu, host = machine.gpu.vram_bytes, machine.host_memory.capacity_bytes
    if vram is not None and vram > gpu:
        raise InputError(f"vram: {args.vram!r} is more than the {gpu / GiB:.1f} GiB of the {machine.gpu.name} in "
                         f"{machine.name}; give at most that, or describe a GPU with more memory (--gpu-vram "
                         f"{args.vram}, or another --gpu from offloadsim hw parts).")
    if ram is not None and ram > host:
        raise InputError(f"ram-budget: {args.ram_budget!r} is more than the {host / GiB:.1f} GiB of RAM in "
                         f"{machine.name}; give at most that, or give the machine's RAM with --ram.")
    b = Budgets.of(machine, vram=vram, ram=ram, pinned=pinned)
    if b.pinned_bytes > b.ram_bytes:
        raise InputError(f"pinned: {args.pinned!r} is more than the RAM budget of {b.ram_bytes / GiB:.1f} GiB; pinned "
                         "memory is part of RAM, give at most the RAM budget.")
    return b


def workers(value) -> int:
    return check_count(value, "workers", 1, MAX_WORKERS, f"this machine has {os.cpu_count()} cores")
