"""llama.cpp's recorded runs (lab/campaigns/h200_llamacpp.py) as runs of its engine model: every llama-bench record
(-ngl sweeps, exported plans) and every llama-batched-bench record (B sequences decoded together), on the GGUF's
own shape and the machine profile calibrated in the same call. Each setting's time is the median of its
repetitions, pooled over a call's rounds."""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from sim.model.families import shape_from_config
from sim.model.formats import parse_format
from sim.model.shapes import ATTENTION_KINDS, ModelShape
from sim.plan import Plan, Workload
from validate.accuracy import peers
from validate.accuracy.records import call_date, read_call
from validate.archs import ARCHS
from validate.checkpoint import make_config

POOL_KEYS = ("load_mode", "no_host", "n_threads")


@dataclass(frozen=True)
class BenchRun:
    """One setting of a call: its kind ('ngl', 'exported', 'batched', 'exported_batched'), its record (pooled), the
    run, and each round's time (per token for a generation test, the prompt's for a prompt test)."""
    kind: str
    rec: dict
    run: peers.PeerRun
    rounds_s: tuple[float, ...] = ()


def _pool_key(rec: dict) -> tuple:
    return (rec.get("kind", ""), tuple(rec.get("args") or ()), rec["n_prompt"], rec["n_gen"],
            *(rec.get(k) for k in POOL_KEYS))


def per_test_s(rec: dict) -> float:
    """A llama-bench record's time of its test (its median repetition): per token for a generation test, the
    prompt's for a prompt test."""
    t = peers.median_time_s(rec)
    return t / rec["n_gen"] if rec["n_gen"] > 0 else t


def pooled(recs: list[dict]) -> list[tuple[dict, tuple[float, ...]]]:
    """Records of one setting timed in several rounds as one, their repetitions pooled (failed runs dropped), with
    each round's time of its test."""
    groups: dict[tuple, list[dict]] = {}
    for rec in recs:
        if "avg_ns" in rec:
            groups.setdefault(_pool_key(rec), []).append(rec)
    out = []
    for group in groups.values():
        samples = [x for rec in group for x in (rec.get("samples_ns") or [rec["avg_ns"]])]
        sd = statistics.stdev(samples) if len(samples) > 1 else group[0]["stddev_ns"]
        rec = dict(group[0], samples_ns=samples, avg_ns=statistics.fmean(samples), stddev_ns=sd, rounds=len(group))
        out.append((rec, tuple(per_test_s(r) for r in group)))
    return out


def head_override(args: list[str]) -> bool:
    """Whether `-ot PATTERN=DEVICE` arguments send the output head's weight to a GPU (llama.cpp matches each pattern
    against the tensor's name with regex_search)."""
    rules = ",".join(args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-ot", "--override-tensor"))
    for rule in rules.split(","):
        pattern, _, device = rule.rpartition("=")
        if pattern and re.search(pattern, "output.weight"):
            return device.upper().startswith("CUDA")
    return False


def head_on_gpu(plan: Plan, shape: ModelShape) -> Plan:
    head = {u.name for u in shape.units if u.kind == "lm_head"}
    return plan.model_copy(update={"placements": [p.model_copy(update={"tier": "vram", "compute": "gpu"})
                                                  if p.unit in head else p for p in plan.placements]})


def kv_per_sequence(batch: int, extra: str, plan: Plan, shape: ModelShape) -> bool:
    """Several sequences each with its own KV cache (no -kvu) with a layer on the GPU (or ggml's offload of
    CPU-held weights): not what the engine model prices (one shared cache); reported apart."""
    if batch < 2 or "-kvu" in extra:
        return False
    t = plan.tiers()
    offload = plan.gpu_offload_min_tokens is not None and batch >= plan.gpu_offload_min_tokens
    return offload or any(t[u.name].compute == "gpu" for u in shape.units if u.kind in ATTENTION_KINDS)


def batched_runs(recs: list[dict], shape: ModelShape, machine, kind: str = "batched", plan: Plan | None = None,
                 label: str = "") -> list[BenchRun]:
    """llama-batched-bench's records as runs of B sequences: a step's time is t_tg / tg, the median over rounds."""
    groups: dict[tuple, list[dict]] = {}
    for rec in recs:
        if "t_tg" in rec:
            args = rec.get("args", [])
            extra = " ".join(a for i, a in enumerate(args)
                             if a.startswith("-") and a != "-ngl" or i and args[i - 1] == "-ncmoe")
            groups.setdefault((rec["n_gpu_layers"], rec["pl"], rec["pp"], rec["tg"], rec.get("n_seq_max", 0), extra),
                              []).append(rec)
    out = []
    for (ngl, b, pp, tg, seqs, extra), group in sorted(groups.items()):
        steps = [r["t_tg"] / tg for r in group]
        w = Workload(batch=b, prompt_tokens=pp, new_tokens=tg + 1)
        words = extra.split()
        ncmoe = int(words[words.index("-ncmoe") + 1]) if "-ncmoe" in words else 0
        mapped = peers.mapped_of(group[0].get("args", []))
        budgets = peers.bench_budgets(machine, mapped)
        plan_b = plan or peers.llamacpp_plan(shape, machine, w, budgets, ngl, ncmoe, mapped)
        if "--no-op-offload" in words:
            plan_b = plan_b.model_copy(update={"gpu_offload_min_tokens": None})
        if head_override(group[0].get("args", [])):
            plan_b = head_on_gpu(plan_b, shape)
        name = f"{label or f'-ngl {ngl}'}{' ' + extra if extra else ''}, {b} sequences"
        rec = {"kind": kind, "n_prompt": pp, "n_gen": tg, "n_gpu_layers": ngl, "batch": b, "extra": extra,
               "kv_per_sequence": kind.endswith("batched") and kv_per_sequence(b, extra, plan_b, shape)}
        run = peers.PeerRun(name, plan_b, w, budgets, statistics.median(steps), float("nan"))
        out.append(BenchRun(kind, rec, run, tuple(steps)))
    return out


def ngl_label(rec: dict) -> str:
    """A record's setting: '-ngl N', its -ncmoe and its other arguments."""
    placement = ("-ngl", "-ncmoe", "--n-gpu-layers", "--n-cpu-moe")
    args = rec.get("args") or []
    rest = [a for i, a in enumerate(args) if a not in placement and not (i and args[i - 1] in placement)]
    return f"-ngl {rec['n_gpu_layers']}" + (f" -ncmoe {rec['n_cpu_moe']}" if rec.get("n_cpu_moe") else "") \
        + (" " + " ".join(rest) if rest else "")


def runs_of(entry: dict, shape: ModelShape, machine) -> list[BenchRun]:
    """The priced settings of an architecture: 'ngl' (llama-bench's own thread count), 'exported' (the planner's
    plans as exported, -ngl form and one sequence), 'exported_batched' and 'batched'."""
    out = []
    for rec, rounds in pooled(entry["llamacpp"]):
        if rec.get("n_cpu_moe") and not shape.is_moe:  # a dense model has no routed experts: -ngl alone, again
            continue
        if rec.get("kind", "ngl") != "ngl" or {"-t", "--threads"} & set(rec.get("args") or []):
            continue  # another thread count: not priced
        out.append(BenchRun("ngl", rec, peers.bench_run(rec, shape, machine, None, ngl_label(rec)), rounds))
    for exp in entry["exported"]:
        if "error" in exp:
            continue
        plan = Plan.model_validate(exp["plan"]).model_copy(update={"engine": "llamacpp"})
        label = f"exported plan, GPU {exp['fraction']:.0%}"
        if exp.get("batch", 1) > 1:
            out += batched_runs(exp["bench"], shape, machine, "exported_batched", plan, label)
            continue
        for rec, rounds in pooled(exp["bench"]):
            out.append(BenchRun("exported", rec, peers.bench_run(rec, shape, machine, plan, label), rounds))
    return out + batched_runs([r for r in entry["llamacpp"] if r.get("kind") == "batched"], shape, machine)


def with_tensor_sizes(entry: dict, shape: ModelShape) -> ModelShape:
    """A shape recorded before units carried their largest tensor, given those of its architecture's config (the
    GGUF's matrices are 16-bit), so llama.cpp's compute buffer is priced as for a new run."""
    if any(u.max_tensor_nbytes for u in shape.units) or entry["arch"] not in ARCHS or \
            round(shape.weight_format.bits_per_weight) != 16:
        return shape
    preset, over = ARCHS[entry["arch"]]
    ref = shape_from_config(make_config(preset, **dict(over, num_hidden_layers=entry["layers"])),
                            parse_format("fp16"))
    big = {u.name: u.max_tensor_nbytes for u in ref.units}
    return shape.model_copy(update={"units": tuple(u.model_copy(update={"max_tensor_nbytes": big.get(u.name, 0)})
                                                   for u in shape.units)})


def flash_attention_build(build: dict) -> bool:
    """Whether the call's llama.cpp had ggml-cuda's flash-attention kernels (llama.cpp's default build)."""
    return "-DGGML_CUDA_FA=ON" in (build.get("cmake_flags") or []) or "/build-fa/" in build.get("binary", "")


@dataclass(frozen=True)
class Arch:
    """One architecture of a call: its entry (with 'file', 'date', 'fa_build'), shape, machine and runs."""
    entry: dict
    shape: ModelShape
    machine: object
    runs: tuple[BenchRun, ...]


def load(paths: list[Path]) -> list[Arch]:
    out = []
    for path in paths:
        doc = read_call(path)
        fa = flash_attention_build(doc.get("build") or {})
        for e in doc["archs"]:
            if "error" in e or "gguf_shape" not in e:
                continue
            shape = with_tensor_sizes(e, ModelShape.model_validate(e["gguf_shape"]))
            machine = peers.profile_machine(e["profile"]["machine"], cpu_llc_default=True)
            runs = tuple(BenchRun(x.kind, x.rec, peers.with_build(x.run, fa), x.rounds_s)
                         for x in runs_of(e, shape, machine))
            entry = dict(e, file=Path(path).name, date=call_date(doc), fa_build=fa)
            out.append(Arch(entry, shape, machine, runs))
    return out
