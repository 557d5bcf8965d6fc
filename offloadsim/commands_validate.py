"""Handlers of make-checkpoint, calibrate and validate (torch-only commands; every input checked before torch runs)."""
from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

from hwmodels.presets import load_machine
from hwmodels.units import GiB, InputError, check_count, parse_bytes
from offloadsim import limits
from offloadsim.output import emit
from hwmodels.files import json_text
from offloadsim.outputs import atomic, check_output
from sim.plan import Budgets, Plan, Workload

MAX_CHECKPOINT_BYTES = 64 * GiB   # make-checkpoint writes random weights; beyond this it is no test checkpoint
MAX_CALIBRATE_LAYER_BYTES = 2 * GiB
CALIBRATE_MODEL = "llama-3.1-8b"
# calibrate --quick without --model: Llama-3.1-8B's architecture at a size a CPU times in seconds
QUICK_MODEL = {"num_hidden_layers": 2, "hidden_size": 512, "intermediate_size": 1536, "num_attention_heads": 8,
               "num_key_value_heads": 2, "vocab_size": 8192, "_name_or_path": "llama-tiny (calibrate --quick)"}


def need_torch(what: str) -> None:
    """Refuse in one sentence when the validate extra (torch, transformers, zstandard) is not installed."""
    missing = [m for m in ("torch", "transformers", "zstandard", "numpy") if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError(f"{what}: needs {', '.join(missing)}, which is not installed; install the extra with "
                         "pip install -e '.[validate]'.")


def _host_ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 * GiB


def _device(device: str | None) -> str | None:
    if device is None:
        return None
    if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise InputError(f"device: {device!r} is not a device; give cpu or cuda.")
    if device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            raise InputError(f"device: {device!r} was asked for but CUDA is not available here; give --device cpu.")
        if ":" in device and int(device[5:]) >= torch.cuda.device_count():
            raise InputError(f"device: {device!r} does not exist; this machine has {torch.cuda.device_count()} GPUs.")
    return device


def make_checkpoint_cmd(args: argparse.Namespace) -> int:
    need_torch("make-checkpoint")
    from sim.model.families import shape_from_config
    from validate.checkpoint import make_checkpoint, make_config
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"out: {args.out!r} exists and is not an empty folder; give a new or empty folder.")
    check_output(str(out), "out")
    check_count(args.seed, "seed", 0, limits.MAX_SEED)
    for field in ("layers", "hidden", "intermediate", "heads", "kv_heads", "vocab"):
        if getattr(args, field) is not None:
            check_count(getattr(args, field), field.replace("_", "-"), 1, 1_000_000)
    cfg = make_config(args.preset, num_hidden_layers=args.layers, hidden_size=args.hidden,
                      intermediate_size=args.intermediate, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, vocab_size=args.vocab)
    shape = shape_from_config(dict(cfg, torch_dtype="bfloat16"), source=f"preset {args.preset}")
    cap = min(MAX_CHECKPOINT_BYTES, _host_ram_bytes() // 2)
    if shape.total_bytes > cap:
        raise InputError(f"layers: the checkpoint would hold {shape.total_bytes / GiB:.1f} GiB of weights, more than "
                         f"{cap / GiB:.1f} GiB (half this machine's RAM, at most 64 GiB); lower --layers, --hidden or "
                         "--vocab.")
    _device(args.device)
    out = make_checkpoint(cfg, out, seed=args.seed, device=args.device)
    return emit(args, {"out": str(out)}, f"checkpoint written to {out}")


def _calibrated_engines() -> list[str]:
    from sim.engines import engines
    return [n for n, e in engines().items() if e.calibrates()]


def calibrate_cmd(args: argparse.Namespace) -> int:
    need_torch("calibrate")
    from sim.model.families import shape_from_config
    from sim.model.resolve import model_config
    model = args.model or CALIBRATE_MODEL
    out = check_output(args.out, "out", (args.model,), (".json",), args.force)
    if not Path(args.dir).is_dir():
        raise InputError(f"dir: {args.dir!r} is not a folder; give a folder on the disk to measure.")
    load_machine(args.base)
    cfg, source = model_config(model)  # a preset, a config.json, a checkpoint folder or a Hugging Face id
    if args.model is None and args.quick:
        cfg.update(QUICK_MODEL)
    shape = shape_from_config(cfg, source=source)
    layer = max((u.nbytes for u in shape.units if u.kind in ("decoder", "attention")), default=0)
    if layer > MAX_CALIBRATE_LAYER_BYTES:
        raise InputError(f"model: calibrate times one decoder layer and {model!r} has {layer / GiB:.1f} GiB "
                         "layers; give a smaller model of the same family, like llama-3.1-8b.")
    from sim.engines import engine_of
    for name in args.peer:  # every name checked before anything is timed
        if not engine_of(name).calibrates():
            raise InputError(f"peer: calibrate does not time {name}'s costs; give one of "
                             f"{', '.join(_calibrated_engines())}, or use calibrate-peer for llama.cpp.")
    from validate.calibrate import calibrate
    prof = calibrate(args.base, Path(args.dir), cfg, quick=args.quick, peers=tuple(dict.fromkeys(args.peer)))
    with atomic(out) as tmp:
        tmp.write_text(json_text(prof))
    m = prof["machine"]
    return emit(args, prof, f"profile written to {args.out}: cold read {m['storage']['cold_read_bytes_per_s'] / 1e9:.2f} GB/s, "
                f"page cache {m['storage']['cache_read_bytes_per_s'] / 1e9:.2f} GB/s, pinned copy "
                f"{m['link']['pinned_h2d_bytes_per_s'] / 1e9:.2f} GB/s, kernel overhead {m['gpu']['kernel_overhead_s'] * 1e6:.1f} us; "
                f"{len(m['compute_grids'])} compute grids measured in the engine; device: {m['gpu']['name']}\n"
                f"kept from preset {args.base!r} (not measured here): {', '.join(prof['calibration']['kept_from_preset'])}")


def _validate_workload(args, shape, machine) -> Workload:
    batch = check_count(args.batch, "batch", 1, 256)
    prompt = check_count(args.prompt_tokens, "prompt-tokens", 1, 32768)
    new = check_count(args.new_tokens, "new-tokens", 1, 1024)
    w = Workload(batch=batch, prompt_tokens=prompt, new_tokens=new, warm=not args.cold)
    limits.check_request(shape, machine, w)
    from sim.costs.memory import activation_bytes, kv_cache_bytes
    need = kv_cache_bytes(shape, w) + 4 * activation_bytes(shape, w)
    room = _host_ram_bytes() // 4
    if need > room:
        raise InputError(f"batch: {batch} x ({prompt} + {new}) tokens need about {need / GiB:.1f} GiB of KV cache and "
                         f"activations on the engine, more than a quarter of this machine's RAM ({room / GiB:.1f} GiB); "
                         "lower --batch or --prompt-tokens.")
    return w


def validate_cmd(args: argparse.Namespace) -> int:
    need_torch("validate")
    from sim.model.resolve import load_model, read_config
    from sim.engines.placements import POLICIES
    from validate.store import build_store, check_store

    ckpt = Path(args.checkpoint)
    if not ckpt.is_dir():
        raise InputError(f"checkpoint: {args.checkpoint!r} is not a folder; give a Hugging Face checkpoint folder "
                         "(make one with 'offloadsim make-checkpoint').")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"out: {args.out!r} is a file; give a folder for the report.")
    check_output(str(out / "report.json") if out.is_dir() else str(out), "out", (args.plan, args.checkpoint),
                 force=args.force)
    device = _device(args.device)
    if args.store is not None and not args.store.strip():
        raise InputError("store: '' is not a folder name; give a folder for the layer store or leave --store out.")
    store = Path(args.store) if args.store is not None else ckpt / ".offloadsim-store"
    if store.exists() and not store.is_dir():
        raise InputError(f"store: {args.store or str(store)!r} is a file; give a folder for the layer store.")
    shape = load_model(str(ckpt))
    config = read_config(ckpt / "config.json")
    machine = load_machine(args.profile if args.profile is not None else "h200-testbox")
    if shape.total_bytes > _host_ram_bytes() // 2:
        raise InputError(f"checkpoint: {args.checkpoint!r} holds {shape.total_bytes / GiB:.1f} GiB of weights, more "
                         "than half this machine's RAM; validate a smaller checkpoint (offloadsim make-checkpoint --layers 2).")
    w = _validate_workload(args, shape, machine)
    budgets = Budgets.of(machine, vram=parse_bytes(args.vram, "vram") if args.vram is not None else None,
                         ram=parse_bytes(args.ram_budget, "ram-budget") if args.ram_budget is not None else None)
    if Path(args.plan).exists():
        plan = Plan.load(args.plan)
    elif args.plan in POLICIES:
        plan = POLICIES[args.plan](shape, machine, w, budgets)
    else:
        raise InputError(f"plan: {args.plan!r} is neither a plan file nor a policy; give a path or one of {', '.join(POLICIES)}.")
    if plan.gpu_count > machine.gpu_count:  # the profile's GPU and link for each GPU the plan splits over
        from hwmodels.topology import with_gpus
        machine = with_gpus(machine, plan.gpu_count)
    if [p.unit for p in plan.placements] != [u.name for u in shape.units]:
        raise InputError(f"plan: it was made for model {plan.model!r}, not this checkpoint; make it with "
                         f"'offloadsim plan {ckpt}'.")
    if (store / "store.json").exists():
        check_store(store, shape)
    else:
        build_store(ckpt, shape, store)
    from validate.engine import Engine
    from validate.report import reference_run, summarize, validate_plan, write_report
    ref = reference_run(store, config, shape, machine, w, device)
    engine = Engine(store, config, shape, plan, machine, device)
    rep, run, pred = validate_plan(engine, shape, machine, plan, w, budgets, args.cold, ref)
    rep["summary"] = summarize([rep])
    write_report(out, rep, run, pred, "report")
    ex = rep.get("exactness", {})
    text = (f"{plan.policy} on {ckpt.name}: predicted {rep['predicted']['time_per_token_s']:.5f} s/token, measured "
            f"{rep['measured']['time_per_token_s']:.5f} s/token ({rep['error_pct']['time_per_token']:+.1f}%); TTFT "
            f"{rep['predicted']['ttft_s']:.4f} vs {rep['measured']['ttft_s']:.4f} s\n"
            + "".join(f"  {s:<8} predicted {v['predicted_s']:.4f} s measured {v['measured_s']:.4f} s\n" for s, v in rep["per_stage"].items())
            + (f"tokens identical: {ex.get('tokens_identical')}, logits bit-identical: {ex.get('logits_bit_identical')}\n" if ex else "")
            + ("note: the CUDA graphs did not fit beside the plan, so the engine launched its kernels eagerly; the "
               "prediction assumes graphs\n" if engine.cuda and not run.graphs else "")
            + f"report written to {args.out}/report.json (+ Gantt, Chrome traces)")
    return emit(args, rep, text)
