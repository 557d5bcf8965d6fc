"""Handler of `offloadsim run`: generate text with offloadsim's engine (validate/runner.py), every input checked
before torch loads; the text streams to stdout, the measured speed and the prediction follow on stderr."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hwmodels.units import GiB, InputError, check_count
from offloadsim import limits
from offloadsim.commands_validate import _device, _host_ram_bytes, need_torch
from offloadsim.output import emit

MAX_PROMPT_CHARS = 1_000_000


def _check_args(args: argparse.Namespace) -> None:
    """The cheap checks, before torch or the checkpoint is read."""
    if not Path(args.checkpoint).is_dir():
        raise InputError(f"checkpoint: {args.checkpoint!r} is not a folder; give a Hugging Face checkpoint folder "
                         "(make one with 'offloadsim make-checkpoint').")
    if not Path(args.plan).is_file():
        raise InputError(f"plan: {args.plan!r} does not exist; make one with 'offloadsim plan {args.checkpoint} "
                         "--machine M --out plan.json'.")
    if not args.prompt.strip():
        raise InputError("prompt: it is empty; give the text to continue with --prompt TEXT.")
    if len(args.prompt) > MAX_PROMPT_CHARS:
        raise InputError(f"prompt: {len(args.prompt)} characters is more than {MAX_PROMPT_CHARS}; give a shorter one.")
    check_count(args.max_new_tokens, "max-new-tokens", 1, limits.MAX_NEW_TOKENS)
    check_count(args.seed, "seed", 0, limits.MAX_SEED)
    if args.store is not None and not args.store.strip():
        raise InputError("store: '' is not a folder name; give a folder for the layer store or leave --store out.")


def _check_request(runner, prompt_tokens: int, new_tokens: int) -> None:
    """The request within the CLI's limits and a quarter of this machine's RAM for KV cache and activations."""
    from sim.costs.memory import activation_bytes, kv_cache_bytes
    from sim.plan import Workload
    w = Workload(batch=1, prompt_tokens=prompt_tokens, new_tokens=new_tokens)
    limits.check_request(runner.shape, runner.machine, w)
    need = kv_cache_bytes(runner.shape, w) + 4 * activation_bytes(runner.shape, w)
    if need > _host_ram_bytes() // 4:
        raise InputError(f"prompt: {prompt_tokens} + {new_tokens} tokens need about {need / GiB:.1f} GiB of KV cache "
                         "and activations, more than a quarter of this machine's RAM; shorten the prompt or lower "
                         "--max-new-tokens.")


def speed_lines(runner, out) -> list[str]:
    """The measured speed beside the prediction for the same request."""
    p = out.predicted
    err = (p["time_per_token_s"] - out.time_per_token_s) / out.time_per_token_s * 100 if out.time_per_token_s else 0.0
    made = f"{len(out.token_ids)} tokens" + (" (stopped at end of sequence)" if out.stopped else "")
    lines = [f"{made} after a {out.prompt_tokens}-token prompt; plan {runner.plan.policy} on {runner.engine.device}",
            f"first token     {out.ttft_s:.4f} s measured, {p['ttft_s']:.4f} s predicted",
            f"time per token  {out.time_per_token_s:.5f} s measured, {p['time_per_token_s']:.5f} s predicted "
            f"({err:+.1f}%) for machine {p['machine']}"]
    if runner.engine.device.type == "cpu":
        lines.append(f"note: this run used the CPU as the device, not {p['machine']}'s GPU: the prediction is for that "
                     "machine, so the two are not comparable here (the same run on that GPU is)")
    return lines


def run_cmd(args: argparse.Namespace) -> int:
    _check_args(args)
    from validate.sampling import Sampling
    sampling = Sampling(args.temperature, args.top_p, args.seed).check()
    need_torch("run")
    device = _device(args.device)
    from validate.runner import Runner
    runner = Runner.load(args.checkpoint, args.plan, args.machine, device, args.store)
    ids = runner.encode(args.prompt, args.chat)
    _check_request(runner, len(ids), args.max_new_tokens)
    out = runner.generate(args.prompt, args.max_new_tokens, sampling, args.chat,
                          stream=None if args.json else sys.stdout, cold=args.cold,
                          ignore_eos=args.ignore_eos)
    if args.json:
        return emit(args, {**out.to_dict(), "plan": runner.plan.policy, "device": str(runner.engine.device)}, "")
    print("\n".join(speed_lines(runner, out)), file=sys.stderr)
    return 0
