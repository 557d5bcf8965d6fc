"""Handlers of make-checkpoint, calibrate and validate."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from hwmodels.presets import load_machine
from hwmodels.units import InputError, parse_bytes
from offloadsim.cli import command, emit
from sim.plan import Budgets, Plan, Workload, write_atomic


@command("make-checkpoint")
def make_checkpoint_cmd(args: argparse.Namespace) -> int:
    from validate.checkpoint import make_checkpoint, make_config
    cfg = make_config(args.preset, num_hidden_layers=args.layers, hidden_size=args.hidden,
                      intermediate_size=args.intermediate, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, vocab_size=args.vocab)
    out = make_checkpoint(cfg, Path(args.out), seed=args.seed, device=args.device)
    return emit(args, {"out": str(out)}, f"checkpoint written to {out}")


@command("calibrate")
def calibrate_cmd(args: argparse.Namespace) -> int:
    from sim.models import _read_config, preset_config
    from validate.calibrate import calibrate
    cfg = _read_config(Path(args.model)) if args.model.endswith(".json") else preset_config(args.model)
    prof = calibrate(args.base, Path(args.dir), cfg, quick=args.quick)
    write_atomic(Path(args.out), json.dumps(prof, indent=1, default=float))
    m = prof["machine"]
    return emit(args, prof, f"profile written to {args.out}: cold read {m['storage']['cold_read_bytes_per_s'] / 1e9:.2f} GB/s, "
                f"page cache {m['storage']['cache_read_bytes_per_s'] / 1e9:.2f} GB/s, pinned copy "
                f"{m['link']['pinned_h2d_bytes_per_s'] / 1e9:.2f} GB/s, kernel overhead {m['gpu']['kernel_overhead_s'] * 1e6:.1f} us")


@command("validate")
def validate_cmd(args: argparse.Namespace) -> int:
    from sim.models import load_model
    from sim.policies import POLICIES
    from validate.engine import Engine
    from validate.report import reference_run, summarize, validate_plan, write_report
    from validate.store import build_store

    ckpt = Path(args.checkpoint)
    if not ckpt.is_dir():
        raise InputError(f"checkpoint: {args.checkpoint!r} is not a folder; give a Hugging Face checkpoint folder "
                         "(make one with 'offloadsim make-checkpoint').")
    shape = load_model(str(ckpt))
    config = json.loads((ckpt / "config.json").read_text())
    machine = load_machine(args.profile or "h200-testbox")
    store = Path(args.store) if args.store else ckpt / ".offloadsim-store"
    if not (store / "store.json").exists():
        build_store(ckpt, shape, store)
    w = Workload(batch=args.batch, prompt_tokens=args.prompt_tokens, new_tokens=args.new_tokens, warm=not args.cold)
    budgets = Budgets.of(machine, vram=parse_bytes(args.vram, "vram") if args.vram else None,
                         ram=parse_bytes(args.ram, "ram") if args.ram else None)
    if Path(args.plan).exists():
        plan = Plan.load(args.plan)
    elif args.plan in POLICIES:
        plan = POLICIES[args.plan](shape, machine, w, budgets)
    else:
        raise InputError(f"plan: {args.plan!r} is neither a plan file nor a policy; give a path or one of {', '.join(POLICIES)}.")
    if [p.unit for p in plan.placements] != [u.name for u in shape.units]:
        raise InputError(f"plan: it was made for model {plan.model!r}, not this checkpoint; make it with "
                         f"'offloadsim plan {ckpt}'.")
    ref = reference_run(store, config, shape, machine, w, args.device)
    engine = Engine(store, config, shape, plan, machine, args.device)
    rep, run, pred = validate_plan(engine, shape, machine, plan, w, budgets, args.cold, ref)
    rep["summary"] = summarize([rep])
    write_report(Path(args.out), rep, run, pred, "report")
    ex = rep.get("exactness", {})
    text = (f"{plan.policy} on {ckpt.name}: predicted {rep['predicted']['time_per_token_s']:.5f} s/token, measured "
            f"{rep['measured']['time_per_token_s']:.5f} s/token ({rep['error_pct']['time_per_token']:+.1f}%); TTFT "
            f"{rep['predicted']['ttft_s']:.4f} vs {rep['measured']['ttft_s']:.4f} s\n"
            + "".join(f"  {s:<8} predicted {v['predicted_s']:.4f} s measured {v['measured_s']:.4f} s\n" for s, v in rep["per_stage"].items())
            + (f"tokens identical: {ex.get('tokens_identical')}, logits bit-identical: {ex.get('logits_bit_identical')}\n" if ex else "")
            + f"report written to {args.out}/report.json (+ Gantt, Chrome traces)")
    return emit(args, rep, text)
