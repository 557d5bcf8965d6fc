"""Predicted versus measured on a real-shape random checkpoint (issue 5), in one run on the GPU machine.

Makes the checkpoint and the layer store, calibrates, then runs 12+ plans (all resident, AirLLM-like,
Accelerate-like, the planner at three VRAM budgets, RAM vs disk, cold vs warm, raw vs compressed, CPU compute) on the
engine and simulates each with the calibrated profile; measures HF Accelerate's own CPU and disk offload at 4 GiB.
Writes validation.json and validation.md into --out. `--tiny` runs the same path on a small model (CPU check).
Run (H200): python benchmarks/h200_validation.py --work /root/ovs --out $OUT
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
import traceback
from pathlib import Path

import torch

GiB = 2**30


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--tokens", type=int, default=6)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--skip-accelerate", action="store_true", help="do not measure HF Accelerate's own offload")
    ap.add_argument("--no-compressed", action="store_true", help="no compressed store or plans (a shorter run)")
    a = ap.parse_args()
    from hwmodels.presets import load_machine
    from planner import plan_with_report
    from sim.memory import min_vram_bytes
    from sim.models import load_model
    from sim.plan import Budgets, Workload
    from sim.policies import POLICIES, make_plan
    from validate.calibrate import calibrate
    from validate.checkpoint import make_checkpoint, make_config
    from validate.engine import Engine
    from validate.report import summarize, validate_plan, write_report, exactness
    from validate.store import build_store

    work, out = Path(a.work), Path(a.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    result: dict = {"model": a.model, "tiny": a.tiny, "cuda": cuda, "torch": torch.__version__, "timings_s": {}}

    def save():
        (out / "validation.json").write_text(json.dumps(result, indent=1, default=float))

    over = dict(num_hidden_layers=4, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=1024) if a.tiny else {}
    cfg = make_config(a.model, **over)
    cfg.pop("rope_scaling", None)
    ckpt, store = work / "ckpt", work / "store"
    t = time.perf_counter()
    if not (ckpt / "config.json").exists():
        make_checkpoint(cfg, ckpt, device="cuda" if cuda else "cpu")
    result["timings_s"]["checkpoint"] = time.perf_counter() - t
    log("checkpoint", result["timings_s"]["checkpoint"])
    shape = load_model(str(ckpt))
    config = json.loads((ckpt / "config.json").read_text())
    t = time.perf_counter()
    if not (store / "store.json").exists():
        build_store(ckpt, shape, store, compress=not a.no_compressed, threads=16 if cuda else 2)
    result["timings_s"]["store"] = time.perf_counter() - t
    log("store", result["timings_s"]["store"])
    t = time.perf_counter()
    prof = calibrate("h200-testbox" if cuda else "rtx3080-laptop", work, config, quick=a.tiny)
    (out / "profile.json").write_text(json.dumps(prof, indent=1, default=float))
    result["timings_s"]["calibrate"] = time.perf_counter() - t
    result["calibration"] = prof["calibration"]["measurements"]
    log("calibrated", json.dumps({k: v for k, v in prof["machine"]["link"].items()}))
    save()
    machine = load_machine(str(out / "profile.json"))
    w = Workload(prompt_tokens=a.prompt, new_tokens=a.tokens)
    big = Budgets.of(machine)
    small = 4 * GiB if not a.tiny else min_vram_bytes(shape, w) + 2 * max(u.nbytes for u in shape.units)
    four = Budgets.of(machine, vram=small)
    names = [u.name for u in shape.units]

    def stream_plan(tier, cpu=False, name=None):
        plan = make_plan(shape, machine, name or f"stream-{tier}", {n: tier for n in names},
                         {n: "cpu" for n in names} if cpu else None, prefetch_depth=2, vram_slots=3, pinned_slots=3,
                         codec=machine_codec(machine))
        return plan

    from sim.equations import machine_codec
    cases = [("resident", POLICIES["resident"](shape, machine, w, big), big, False)]
    cases.append(("airllm (disk, cold)", POLICIES["airllm"](shape, machine, w, four), four, True))
    cases.append(("accelerate-like 4GiB", POLICIES["accelerate"](shape, machine, w, four), four, False))
    cases.append(("stream pinned RAM 4GiB", stream_plan("ram_pinned"), four, False))
    cases.append(("stream pageable RAM", stream_plan("ram_pageable"), four, False))
    if not a.no_compressed:
        cases.append(("stream compressed RAM", stream_plan("ram_compressed"), four, False))
    cases.append(("stream disk raw, cold", stream_plan("disk_raw"), four, True))
    cases.append(("stream disk raw, warm", stream_plan("disk_raw"), four, False))
    if not a.no_compressed:
        cases.append(("stream disk compressed, cold", stream_plan("disk_compressed"), four, True))
    for vram in ((small, 8 * GiB, 12 * GiB) if not a.tiny else (small, small * 2, small * 3)):
        b = Budgets.of(machine, vram=vram)
        rep = plan_with_report(shape, machine, w, b, confirm=False, allow_cpu=False,
                               tiers=("vram", "ram_pinned", "ram_pageable", "disk_raw") if a.no_compressed else None)
        cases.append((f"planner {vram / GiB:.1f}GiB", rep.plan, b, False))
    cases.append(("llamacpp-like 4GiB (CPU compute)", POLICIES["llamacpp"](shape, machine, w, four), four, False))
    rows, ref = [], None
    for label, plan, budgets, cold in cases:
        t = time.perf_counter()
        try:
            engine = Engine(store, config, shape, plan, machine)
            if ref is None:
                engine.run(w)  # warm-up: CUDA context, cuBLAS handles, page cache of nothing in particular
            rep, run, pred = validate_plan(engine, shape, machine, plan, w, budgets, cold, ref)
            if ref is None:
                ref = run
                rep["exactness"] = exactness(ref, run)
            rep["label"] = label
            rep["streamed_bytes_per_token"] = sum(u.nbytes for u, p in zip(shape.units, plan.placements) if p.tier != "vram")
            rows.append(rep)
            slug = label.split(" (")[0].replace(" ", "-").replace(",", "")
            write_report(out / "plans", rep, run, pred, slug)
            log(f"{label}: predicted {rep['predicted']['time_per_token_s']:.4f} measured {rep['measured']['time_per_token_s']:.4f} "
                f"({rep['error_pct']['time_per_token']:+.1f}%) exact {rep.get('exactness', {}).get('logits_bit_identical')} "
                f"[{time.perf_counter() - t:.0f}s]")
            del engine
            if cuda:
                torch.cuda.empty_cache()
        except Exception as exc:  # keep going: one failing plan must not lose the others
            rows.append({"label": label, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]})
            log(label, "FAILED", exc)
        result["plans"] = rows
        save()
    ok = [r for r in rows if "error" not in r]
    result["summary"] = summarize(ok)
    link = machine.link.pinned_h2d_bytes_per_s
    for r in ok:
        if r["label"] == "stream pinned RAM 4GiB":
            floor = r["streamed_bytes_per_token"] / link
            result["engine_speed_pinned"] = {"floor_s": floor, "measured_s": r["measured"]["time_per_token_s"],
                                             "ratio": r["measured"]["time_per_token_s"] / floor}
        if r["label"] == "stream disk raw, cold":
            floor = r["streamed_bytes_per_token"] / machine.storage.cold_read_bytes_per_s
            result["engine_speed_disk_cold"] = {"floor_s": floor, "first_token_s": r["measured"]["ttft_s"],
                                                "ratio_first_token": r["measured"]["ttft_s"] / floor,
                                                "note": "after the first token the page cache serves the reads"}
    save()
    result["accelerate"] = {"skipped": True} if a.skip_accelerate else accelerate_offload(ckpt, store, w, a, work)
    save()
    log("done", json.dumps(result.get("summary")))


def accelerate_offload(ckpt: Path, store: Path, w, a, work: Path) -> dict:
    """HF Accelerate's own big-model inference at 4 GiB of GPU: CPU offload, then disk offload."""
    out = {}
    try:
        from accelerate import infer_auto_device_map, init_empty_weights
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as exc:
        return {"error": str(exc)}
    cuda = torch.cuda.is_available()
    if not cuda:
        return {"skipped": "needs CUDA"}
    shutil.rmtree(store, ignore_errors=True)  # disk space for the offload folder
    config = AutoConfig.from_pretrained(ckpt)
    ids = torch.randint(0, config.vocab_size, (1, a.prompt), device="cuda")
    for label, cpu_mem in (("cpu_offload", "100GiB"), ("disk_offload", "1GiB")):
        try:
            t = time.perf_counter()
            with init_empty_weights():
                empty = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
            dmap = infer_auto_device_map(empty, max_memory={0: "4GiB", "cpu": cpu_mem},
                                         no_split_module_classes=["LlamaDecoderLayer", "Qwen3DecoderLayer"], dtype=torch.bfloat16)
            offload = work / "offload"
            model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16, device_map=dmap,
                                                         offload_folder=str(offload))
            load_s = time.perf_counter() - t
            times = {}
            for n in (2, 2 + a.tokens):
                torch.cuda.synchronize()
                t = time.perf_counter()
                model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
                torch.cuda.synchronize()
                times[n] = time.perf_counter() - t
            per_token = (times[2 + a.tokens] - times[2]) / a.tokens
            where = {}
            for v in dmap.values():
                where[str(v)] = where.get(str(v), 0) + 1
            out[label] = {"time_per_token_s": per_token, "load_s": load_s, "modules_by_device": where}
            log(label, out[label])
            del model
            torch.cuda.empty_cache()
            shutil.rmtree(offload, ignore_errors=True)
        except Exception as exc:
            out[label] = {"error": f"{type(exc).__name__}: {exc}"}
            log(label, "FAILED", exc)
    return out


if __name__ == "__main__":
    main()
