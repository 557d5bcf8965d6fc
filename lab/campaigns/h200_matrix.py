"""The validation matrix (issue 9): predicted against measured across architectures, sizes, batches, prompt lengths,
every tier, cold and warm, CPU compute, small pinned budgets and the planner at four VRAM budgets.

For each architecture it does what a user does with the CLI (`make-checkpoint` -> `calibrate --model` -> `plan` ->
`validate`), in one process through the same functions so the GPU time fits: a random-weight checkpoint of the real
layer shapes (fewer layers), the layer store (raw + compressed), a full calibration for that architecture, then every
plan run on the engine and simulated with the calibrated profile. GPU-computed plans are checked bit for bit against
the all-resident run of the same workload; the resident run against Hugging Face transformers' own forward.
Run (H200): python lab/campaigns/h200_matrix.py --archs llama-8b,qwen3-4b --out $OUT/matrix-a.json
Then, here: python lab/reports/matrix_report.py FILES... (re-predicts every run with the current simulator).
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
import traceback
from pathlib import Path

import torch

from hwmodels.units import GiB

from validate.archs import ARCHS  # noqa: F401  (the shapes the H200 runs use; kept free of torch)
T0 = time.perf_counter()


def log(*a):
    print(f"[{time.perf_counter() - T0:6.0f}s]", *a, flush=True)


def cases(shape, machine, budgets_of, codec, new_tokens: int = 6):
    """(label, plan, budgets, cold, batch, prompt): the matrix rows for one architecture."""
    from planner import plan_with_report
    from sim.costs.memory import memory_use, min_vram_bytes
    from sim.plan import Workload
    from sim.engines.placements import POLICIES
    from sim.engines.common import make_plan
    names = [u.name for u in shape.units]
    dec = [u.name for u in shape.units if u.kind == "decoder"]
    ends = [n for n in names if n not in dec]
    total = sum(u.nbytes for u in shape.units)

    def stream(tiers, label, cpu=(), **kw):
        """Ends resident, `tiers` for the rest; the units named in `cpu` computed on the CPU."""
        t = {n: "vram" for n in ends}
        t.update(tiers)
        return make_plan(shape, machine, label, t, {n: "cpu" for n in cpu},
                         prefetch_depth=2, vram_slots=3, pinned_slots=3, codec=codec, **kw)

    half = len(dec) // 2
    big = budgets_of()
    out = [
        ("resident", POLICIES["resident"](shape, machine, Workload(), big), big, False, 16, 2048),
        ("stream pinned RAM", stream({n: "ram_pinned" for n in dec}, "stream-pinned"), big, False, 4, 512),
        ("stream pageable RAM", stream({n: "ram_pageable" for n in dec}, "stream-pageable"), big, False, 1, 2048),
        ("stream compressed RAM", stream({n: "ram_compressed" for n in dec}, "stream-compressed"), big, False, 16, 32),
        ("stream disk raw cold", stream({n: "disk_raw" for n in dec}, "stream-disk"), big, True, 1, 512),
        ("stream disk compressed cold", stream({n: "disk_compressed" for n in dec}, "stream-disk-zst"), big, True, 4, 2048),
        ("pinned budget < streamed set", stream({n: "ram_pinned" if k < half else "ram_pageable" for k, n in enumerate(dec)},
                                                "pinned-half"), big, False, 16, 512),
    ]
    w1 = Workload(batch=1, prompt_tokens=32, new_tokens=new_tokens)
    b_small = budgets_of(vram=min_vram_bytes(shape, w1) + int(0.4 * total))
    # llama.cpp's placement, run (and so predicted) as offloadsim's engine runs it
    like = POLICIES["llamacpp"](shape, machine, w1, b_small).model_copy(update={"engine": "offloadsim"})
    need = memory_use(shape, like, w1, b_small).vram_bytes  # that engine's staging, not llama.cpp's buffers
    b_like = b_small if need <= b_small.vram_bytes else budgets_of(vram=need)  # (call Q: refused at 1.25 GiB)
    out.append(("llamacpp-like CPU compute", like, b_like, False, 1, 32))
    big_dec = max(u.nbytes for u in shape.units if u.kind == "decoder")
    for frac, (b, p) in zip((0.4, 0.55, 0.7, 0.85), ((1, 512), (4, 32), (16, 2048), (1, 2048))):
        w = Workload(batch=b, prompt_tokens=p, new_tokens=new_tokens)  # budgets: 'barely streams' to 'nearly fits'
        vram = max(min_vram_bytes(shape, w) + 2 * big_dec, int(frac * total))
        bud = budgets_of(vram=vram)
        rep = plan_with_report(shape, machine, w, bud, confirm=False, allow_cpu=False)
        out.append((f"planner {vram / GiB:.2f}GiB", rep.plan, bud, False, b, p))
    out.append(("stream disk raw warm", stream({n: "disk_raw" for n in dec}, "stream-disk"), big, False, 4, 32))
    out.append(("CPU decoders, resident ends", stream({n: "ram_pageable" for n in dec}, "cpu-decoders", cpu=dec), big,
                False, 4, 32))
    # the KV cache where each layer computes (sim.costs.memory.split_kv_bytes): half the decoders on the CPU over a long
    # context, the prompt multiplied on the GPU (each CPU layer's cache copied there for it), decode on the CPU
    out.append(("half the decoders on the CPU, long context", stream(
        {n: "ram_pageable" if k < half else "ram_pinned" for k, n in enumerate(dec)}, "cpu-half-long",
        cpu=dec[:half], gpu_offload_min_tokens=32), big, False, 8, 2048))
    # past the CPU grids' longest context (4100): one sequence of 8192, every decoder on the CPU
    out.append(("CPU decoders, one long prompt", stream({n: "ram_pageable" for n in dec}, "cpu-long", cpu=dec,
                                                        gpu_offload_min_tokens=32), big, False, 1, 8192))
    # 32 sequences: every step reaches the threshold, so each step moves each CPU layer's cache to the GPU
    out.append(("half the decoders on the CPU, every step offloaded", stream(
        {n: "ram_pinned" for n in dec}, "cpu-half-b32", cpu=dec[:half], gpu_offload_min_tokens=32), big, False,
        32, 512))
    return out


def hf_check(ckpt: Path, engine_run, w) -> dict:
    """Hugging Face transformers on the same checkpoint and prompt against the engine: its greedy generation (tokens)
    and, teacher-forced on the engine's tokens, its logits at every step (so one near-tie flipped by bf16 rounding
    does not hide how close the rest is). Random weights give nearly flat logits: the engine's top-2 margin at the
    first differing token says whether a difference is such a tie."""
    from transformers import AutoModelForCausalLM
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16).to(dev)
    prompt = torch.randint(0, model.config.vocab_size, (w.batch, w.prompt_tokens),
                           generator=torch.Generator().manual_seed(w.seed)).to(dev)
    out = model.generate(prompt, max_new_tokens=w.new_tokens, min_new_tokens=w.new_tokens, do_sample=False,
                         output_logits=True, return_dict_in_generate=True)
    toks = out.sequences[:, w.prompt_tokens:].cpu()
    forced = torch.cat([prompt, engine_run.tokens[:, :-1].to(dev)], dim=1)
    with torch.no_grad():
        tf = model(forced).logits[:, w.prompt_tokens - 1:].float().cpu()  # [batch, new_tokens, vocab]
    eng = torch.stack(engine_run.logits, dim=1)
    per_step = [float((tf[:, s] - eng[:, s]).abs().max()) for s in range(eng.shape[1])]
    same = toks == engine_run.tokens
    margin = None
    if not bool(same.all()):
        b, s = [int(v) for v in (~same).nonzero()[0]]
        top = eng[b, s].topk(2).values
        margin = float(top[0] - top[1])
    del model
    return {"tokens_identical": bool(same.all()), "teacher_forced_max_abs_logit_diff": max(per_step),
            "teacher_forced_per_step": per_step, "engine_top2_margin_at_first_difference": margin}


TINY = dict(num_hidden_layers=4, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
            head_dim=64, vocab_size=1024)


def prepare_arch(arch: str, work: Path, tiny: bool, layers: int | None = None) -> tuple:
    """What a user does before validating: a random-weight checkpoint of the architecture, its layer store (raw and
    compressed) and a calibration. Returns (checkpoint, store, shape, config, profile path, the entry to record)."""
    from sim.model.resolve import load_model
    from validate.calibrate import calibrate
    from validate.checkpoint import make_checkpoint, make_config
    from validate.store import build_store
    preset, over = ARCHS[arch]
    cfg = make_config(preset, **(TINY if tiny else dict(over, **({"num_hidden_layers": layers} if layers else {}))))
    cfg.pop("rope_scaling", None)
    ckpt, store = work / arch / "ckpt", work / arch / "store"
    shutil.rmtree(work / arch, ignore_errors=True)  # a folder left by an earlier call on a warm machine
    t = time.perf_counter()
    make_checkpoint(cfg, ckpt, device="cuda" if torch.cuda.is_available() else "cpu")
    shape = load_model(str(ckpt))
    config = json.loads((ckpt / "config.json").read_text())
    build_store(ckpt, shape, store, compress=True, threads=16)
    log(arch, "checkpoint + store", f"{time.perf_counter() - t:.0f}s")
    t = time.perf_counter()
    prof = calibrate("h200-testbox", work / arch, config, quick=tiny, eager=False)  # no peers in this matrix
    prof_path = work / arch / "profile.json"
    prof_path.write_text(json.dumps(prof, default=float))
    entry = {"arch": arch, "config": {k: config.get(k) for k in ("model_type", "hidden_size", "intermediate_size",
                                                                  "num_attention_heads", "num_key_value_heads",
                                                                  "head_dim", "vocab_size", "num_hidden_layers")},
             "calibrate_s": time.perf_counter() - t, "profile": prof, "runs": [], "host_gbps": host_gbps(),
             "shape": json.loads(shape.model_dump_json())}
    log(arch, "calibrated", f"{entry['calibrate_s']:.0f}s")
    return ckpt, store, shape, config, prof_path, entry


_HOST_REF: list = []


def host_gbps() -> float:
    """The host's CPU speed now: a bf16 matrix-vector product over 256 MiB on as many threads as the engine's CPU
    compute takes, the median of 5, in GB/s. Timed after calibration and before every run, so a CPU row's miss can
    be set against how far the host moved since its grids were timed (calls N-Q: up to 2x, lab/journal/validation.md)."""
    import os
    import statistics
    from validate.engine import RESERVED_CORES
    if not _HOST_REF:
        _HOST_REF.append(torch.randn(32768, 4096, dtype=torch.bfloat16))
    w, x = _HOST_REF[0], torch.randn(1, 4096, dtype=torch.bfloat16)
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 4) - RESERVED_CORES))
    try:
        times = []
        for _ in range(5):
            t = time.perf_counter()
            torch.nn.functional.linear(x, w)
            times.append(time.perf_counter() - t)
    finally:
        torch.set_num_threads(old)
    return w.numel() * 2 / statistics.median(times) / 1e9


def run_case(entry: dict, case: tuple, ref, store: Path, config: dict, shape, machine, new_tokens: int) -> None:
    """One plan on a fresh engine, predicted and measured; the row (or the error) is appended to the entry."""
    from sim.plan import Workload
    from validate.engine import Engine
    from validate.report import validate_plan
    label, plan, budgets, cold, b, p = case
    t = time.perf_counter()
    w = Workload(batch=b, prompt_tokens=p, new_tokens=new_tokens)
    try:
        host = host_gbps()
        engine = Engine(store, config, shape, plan, machine, cold=cold)
        rep, run, _ = validate_plan(engine, shape, machine, plan, w, budgets, cold, ref(b, p))
        rep.update(label=label, batch=b, prompt=p, gpu_only=all(x.compute == "gpu" for x in plan.placements),
                   tiers=sorted({x.tier for x in plan.placements}), seconds=time.perf_counter() - t,
                   plan=json.loads(plan.model_dump_json()), workload=json.loads(w.model_dump_json()),
                   budgets=json.loads(budgets.model_dump_json()), host_gbps=host,
                   measured_events=[[e.token, e.unit, e.stage, e.start_s, e.end_s] for e in run.events
                                    if e.stage in ("compute", "copy", "read", "unpack")])
        entry["runs"].append(rep)
        log(f"{entry['arch']} {label} b{b} p{p}: tpot {rep['predicted']['time_per_token_s']:.4f}/"
            f"{rep['measured']['time_per_token_s']:.4f} ({rep['error_pct']['time_per_token']:+.1f}%) ttft "
            f"{rep['error_pct']['ttft']:+.1f}% load {rep['load']['error_pct']:+.1f}% exact "
            f"{rep['exactness']['logits_bit_identical']} [{time.perf_counter() - t:.0f}s]")
    except Exception as exc:
        entry["runs"].append({"label": label, "error": f"{type(exc).__name__}: {exc}",
                              "trace": traceback.format_exc()[-1500:]})
        log(entry["arch"], label, "FAILED", exc)


def run_arch(arch: str, work: Path, result: dict, save, deadline: float, new_tokens: int, tiny: bool,
             limit: int | None, repeats: int = 0, layers: int | None = None, only: str = "") -> None:
    """Prepare one architecture, check the resident engine against transformers and itself, then run its plans
    (the first `limit`, then `repeats` of them again in fresh engines) until the deadline."""
    from hwmodels.presets import load_machine
    from sim.costs.equations import machine_codec
    from sim.plan import Budgets, Workload
    from sim.engines.placements import POLICIES
    from validate.engine import Engine
    from validate.report import exactness
    ckpt, store, shape, config, prof_path, entry = prepare_arch(arch, work, tiny, layers)
    result["archs"].append(entry)
    save()
    machine = load_machine(str(prof_path))
    codec = machine_codec(machine, ratio=entry["profile"]["calibration"]["measurements"]["codec"]["ratio"])
    resident = Engine(store, config, shape, POLICIES["resident"](shape, machine, Workload(), Budgets.of(machine)), machine)
    refs: dict = {}

    def reference(b, p):
        if (b, p) not in refs:
            refs[(b, p)] = resident.run(Workload(batch=b, prompt_tokens=p, new_tokens=new_tokens))
        return refs[(b, p)]
    try:
        entry["transformers"] = hf_check(ckpt, reference(1, 32), Workload(batch=1, prompt_tokens=32, new_tokens=new_tokens))
    except Exception as exc:
        entry["transformers"] = {"error": f"{type(exc).__name__}: {exc}"}
    again = resident.run(Workload(batch=4, prompt_tokens=512, new_tokens=new_tokens))
    entry["resident_repeat"] = exactness(reference(4, 512), again)
    log(arch, "transformers", entry["transformers"], "repeat", entry["resident_repeat"])
    todo = [c for c in cases(shape, machine, lambda **k: Budgets.of(machine, **k), codec, new_tokens)
            if only in c[0]][:limit]
    todo += [(f"{c[0]} (repeat)",) + c[1:] for c in todo if not c[3]][:repeats]  # fresh engines: the spread
    for case in todo:
        if time.perf_counter() > deadline:
            entry["runs"].append({"label": case[0], "skipped": "deadline"})
            continue
        run_case(entry, case, reference, store, config, shape, machine, new_tokens)
        torch.cuda.empty_cache()
        save()
    resident = None  # free the resident engine before the next architecture
    refs.clear()
    torch.cuda.empty_cache()
    shutil.rmtree(work / arch, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default="llama-8b,qwen3-4b")
    ap.add_argument("--work", default="/tmp/offloadsim-matrix")
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=540, help="stop starting runs after this many seconds")
    ap.add_argument("--new-tokens", type=int, default=6)
    ap.add_argument("--tiny", action="store_true", help="small shapes on whatever device there is (a smoke test)")
    ap.add_argument("--layers", type=int, default=None, help="cut every architecture to this many layers "
                    "(default: validate/archs.py's count)")
    ap.add_argument("--only", default="", help="only the cases whose label contains this text")
    a = ap.parse_args()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "archs": [],
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(__import__("sys").argv)}

    def save():
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=float))
        tmp.replace(out)
    deadline = T0 + a.budget_s
    for spec in a.archs.split(","):  # NAME[:N[:R]]: only the first N plans; then R of them again in fresh engines
        arch, n, r = (spec.split(":") + ["", ""])[:3]
        try:
            run_arch(arch, Path(a.work), result, save, deadline, a.new_tokens, a.tiny, int(n) if n else None,
                     int(r) if r else 0, a.layers, a.only)
        except Exception as exc:
            result["archs"].append({"arch": arch, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]})
            log(arch, "FAILED", exc)
        save()
    log("done")


if __name__ == "__main__":
    main()
