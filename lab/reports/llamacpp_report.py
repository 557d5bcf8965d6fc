"""Predicted against measured for llama.cpp (issue 11), from files written by lab/campaigns/h200_llamacpp.py.

Every llama-bench record becomes a run of the llama.cpp engine model: the placement `-ngl N` gives
(`sim.engines.placements.llamacpp_ngl`, or the exported plan as recorded), on the machine profile calibrated in the same call
and the GGUF's own shape. A generation test (G tokens from an empty context) is compared by its time per token, a
prompt-processing test (P tokens) by its time to the first token; a llama-batched-bench record (B sequences decoded
together) by the time of one of its steps. The engine's costs (the speed its CPU kernels stream weights at, the
head's, their multiply rate and per-operator cost, its GPU decode kernels' per-operator and per-row costs for one
and for several tokens a step, its per-weight split of ggml's offload of CPU-held weights at 32 or more tokens a step,
its per-token step, its prefill kernels against the GPU grid;
validate/peer_calibration.py) are fitted on the architectures named by --fit (default: the first of the first
file): generation at the smallest -ngl, the middle one, the largest and the one below it, the 128-token prompt at
the largest, several sequences at the smallest and the largest batched -ngl, and one sequence at the largest
(llama-batched-bench times the decode steps that warm its CUDA graph up: gpu_graph_warmup_op_s). Every other record
is held out.
Each setting's time is the median of its repetitions (pooled over rounds). A llama-bench record's -fa (its flash_attn
field: -1 auto, 0 off, 1 on) is priced as run (PeerSpec.flash_attn, sim.run.schedule.ggml_flash_attention); a
llama-batched-bench run, as -fa auto (no stored one sets it).
Calls Y, Z and AA ran llama.cpp's default build, with ggml-cuda's flash-attention kernels (flash_attention_build): the
runs of such a build are priced with PeerSpec.flash_attention (the others pay gpu_mm_attention_s per GPU attention
on a one-token step), enter the fit with every layer on the GPU only (on_gpu), and are held out apart.
Prompt tests of weights in pinned host buffers (-lm none) named by --fit-pinned fit their own per-split cost
(gpu_offload_split_pinned_s) alone, the rest as fitted; generation tests of an MoE with every layer on the GPU named
by --fit-moe, the GPU's cost per routed expert of a block (gpu_moe_expert_s), likewise; prompt tests of mapped
weights named by --fit-split, the split cost of a prompt's step (gpu_offload_split_prompt_s), likewise. Each call's
host is also calibrated apart: one factor on llama.cpp's CPU speeds fitted on its generation test that streams the
most weights on the CPU (host_scales, what `offloadsim calibrate-peer` does with a user's llama-bench output),
every other run held out ("one calibration run
per call"). llama.cpp's own --fit placements (h200_llamacpp.py --fit-shares) are priced as placed and as the
`llamacpp` policy places the model at the budget llama.cpp fitted (its layout compared with the one printed), and
llama-fit-params' own projection of its GPU memory for each placement it tried against sim.costs.memory.memory_use's.
Run (docs/peers): python ../../benchmarks/llamacpp_report.py \
     llamacpp-{a,b,e,f,g,h,i,j,k,l,m,n,o,p,q,s,t,u,v,w,x,y,z,aa,ab,ac,ad,ae,af,ag,ah,ai,aj,ak,al,am,an,ao,ap,aq}.json \
     --fit llamacpp-a.json:llama-8b --fit llamacpp-j.json:qwen3-0.6b --fit llamacpp-j.json:llama-1b \
     --fit llamacpp-i.json:qwen3-4b --fit llamacpp-m.json:llama-1b --fit llamacpp-p.json:llama-1b \
     --fit llamacpp-q.json:llama-1b --fit llamacpp-s.json:llama-1b --fit llamacpp-z.json:llama-1b \
     --fit-pinned llamacpp-ae.json:llama-1b --fit-moe llamacpp-ae.json:moe-64x8 \
     --fit-split llamacpp-u.json:smollm-135m --fit-split llamacpp-u.json:llama-70b [--json OUT]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
import statistics
from pathlib import Path

from hwmodels.presets import load_machine
from hwmodels.specs import MachineSpec
from sim.costs.memory import PlanError, check_plan, memory_use
from sim.plan import Plan, Workload
from sim.engines.llamacpp.fit import fit_placement
from sim.engines.llamacpp.layout import llamacpp_ngl
from sim.model.shapes import ATTENTION_KINDS, ModelShape
from validate.accuracy.llamacpp_runs import flash_attention_build, head_on_gpu, head_override, with_tensor_sizes
from sim.engines.llamacpp.bench import bench_budgets as budgets, mapped_of, run_of
from sim.engines.llamacpp.fitting import fit_host_scale, host_scaled
from validate.peer_calibration import PeerRun, fit, fit_scalar, predict, with_peer


HOST = load_machine("h200-testbox")


def pooled(recs: list[dict]) -> list[dict]:
    """Records of one setting timed in several rounds (h200_llamacpp.py --rounds) as one, their repetitions
    pooled; failed runs dropped."""
    groups: dict[tuple, list[dict]] = {}
    for rec in recs:
        if "avg_ns" in rec:
            key = (rec.get("kind", ""), tuple(rec.get("args") or ()), rec["n_prompt"], rec["n_gen"],
                   rec.get("load_mode"), rec.get("no_host"), rec.get("n_threads"))  # one llama-bench value each
            groups.setdefault(key, []).append(rec)
    out = []
    for group in groups.values():
        samples = [x for rec in group for x in (rec.get("samples_ns") or [rec["avg_ns"]])]
        mean = statistics.fmean(samples)
        sd = statistics.stdev(samples) if len(samples) > 1 else group[0]["stddev_ns"]
        out.append(dict(group[0], samples_ns=samples, avg_ns=mean, stddev_ns=sd, rounds=len(group)))
    return out


def batched_runs(recs: list[dict], shape: ModelShape, machine: MachineSpec, kind: str = "batched",
                 plan: Plan | None = None, label: str = "") -> list[tuple[str, dict, PeerRun]]:
    """llama-batched-bench's records (h200_llamacpp.py --batches, --export-batch-shares) as runs of B sequences:
    each of its tg steps decodes one token of every sequence after a prompt of pp tokens each, so the time per
    token (per step) is t_tg / tg; one record per round, pooled by their median. `plan`: the exported plan the
    records ran (else the -ngl placement)."""
    groups: dict[tuple, list[dict]] = {}
    for rec in recs:
        if "t_tg" in rec:
            args = rec.get("args", [])
            extra = " ".join(a for i, a in enumerate(args)  # e.g. -kvu, -ncmoe 4
                             if a.startswith("-") and a != "-ngl" or i and args[i - 1] == "-ncmoe")
            key = (rec["n_gpu_layers"], rec["pl"], rec["pp"], rec["tg"], rec.get("n_seq_max", 0), extra)
            groups.setdefault(key, []).append(rec)
    out = []
    for (ngl, b, pp, tg, seqs, extra), group in sorted(groups.items()):
        steps = [r["t_tg"] / tg for r in group]
        w = Workload(batch=b, prompt_tokens=pp, new_tokens=tg + 1)
        mean = statistics.fmean(steps)
        rec = {"kind": kind, "n_prompt": pp, "n_gen": tg, "n_gpu_layers": ngl, "batch": b, "rounds": len(group),
               # one round: its spread was not measured (never counted among the steady runs)
               "avg_ns": mean * 1e9, "stddev_ns": (statistics.stdev(steps) if len(steps) > 1 else float("nan")) * 1e9,
               "n_seq_max": seqs, "extra": extra}
        room = f" of {seqs}" if seqs and seqs != b else ""
        name = f"{label or f'-ngl {ngl}'}{' ' + extra if extra else ''}, {b} sequences{room}"
        words = extra.split()
        ncmoe = int(words[words.index("-ncmoe") + 1]) if "-ncmoe" in words else 0
        mapped = mapped_of(group[0].get("args", []))
        plan_b = plan or llamacpp_ngl(shape, machine, w, budgets(machine, mapped), ngl, ncmoe, mapped)
        if "--no-op-offload" in words:  # CPU-held weights multiplied on the CPU at any step size
            plan_b = plan_b.model_copy(update={"gpu_offload_min_tokens": None})
        if head_override(group[0].get("args", [])):  # -ot sends the output head to the GPU
            plan_b = head_on_gpu(plan_b, shape)
        run = PeerRun(name, plan_b, w, budgets(machine, mapped), statistics.median(steps), float("nan"))
        out.append((kind, dict(rec, kv_per_sequence=kv_per_sequence(kind, rec, run, shape)), run))
    return out


def runs_of(entry: dict, shape: ModelShape, machine: MachineSpec) -> list[tuple[str, dict, PeerRun]]:
    """(kind, record, run) for every setting: 'ngl' for the sweep, 'threads' for other thread counts, 'exported'
    for the planner's plans as exported, 'exported_ot' for a plan's leading CPU run sent back by -ot instead."""
    out = []
    for rec in pooled(entry["llamacpp"]):
        if rec.get("n_cpu_moe") and not shape.is_moe:  # a dense model has no routed experts: -ngl alone, again
            continue  # (call AE timed it before the harness kept -ncmoe to MoE)
        kind = rec.get("kind", "ngl")
        if {"-t", "--threads"} & set(rec.get("args") or []):  # another thread count (--variant='-t 8'): not priced
            kind = "threads"
        label = " ".join(rec["args"]) if kind == "threads" else ngl_label(rec)
        out.append((kind, rec, run_of(rec, shape, machine, None, label)))
    for exp in entry["exported"]:
        if "error" in exp:
            continue
        plan = Plan.model_validate(exp["plan"]).model_copy(update={"engine": "llamacpp"})
        if exp.get("batch", 1) > 1:
            out += batched_runs(exp["bench"], shape, machine, "exported_batched", plan,
                                f"exported plan, GPU {exp['fraction']:.0%}")
            continue
        for kind, recs, form in (("exported", exp["bench"], ""), ("exported_ot", exp.get("bench_ot", []), " by -ot")):
            for rec in pooled(recs):
                out.append((kind, dict(rec, fraction=exp["fraction"]),
                            run_of(rec, shape, machine, plan, f"exported plan, GPU {exp['fraction']:.0%}{form}")))
    return out + fit_runs(entry, shape, machine) + \
        batched_runs([r for r in entry["llamacpp"] if r.get("kind") == "batched"], shape, machine)


def fit_rules(args: list[str]) -> list[tuple[str, str]]:
    """(pattern, buffer type) of a llama-bench record's -ot rules (joined by ';', as --fit's are given to it)."""
    rules = ";".join(args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-ot", "--override-tensor"))
    return [(r.rpartition("=")[0], r.rpartition("=")[2]) for r in rules.split(";") if "=" in r]


def cpu_parts(shape: ModelShape, args: list[str]) -> tuple[set[int], set[int]]:
    """(blocks whose routed experts, blocks whose feed-forward weights) a run's -ot rules keep in system memory, as
    llama.cpp matches them (regex_search on the tensor's name): the first from two of the three expert tensors
    (--fit's partial layer may move one or two: a layer's experts count where most of their bytes are); the second,
    of a dense model, from ffn_up and ffn_down (--fit's partial layer, its attention left on the GPU)."""
    experts, ffn = set(), set()
    rules = [(re.compile(p), buft) for p, buft in fit_rules(args)]

    def held(name: str) -> bool:  # the first rule that matches the tensor decides, as llama.cpp's loader does
        return next((not buft.upper().startswith("CUDA") for p, buft in rules if p.search(name)), False)
    for b in range(shape.n_blocks):
        if shape.is_moe:
            if sum(held(f"blk.{b}.ffn_{t}_exps.weight") for t in ("gate", "up", "down")) >= 2:
                experts.add(b)
        elif held(f"blk.{b}.ffn_up.weight") and held(f"blk.{b}.ffn_down.weight"):
            ffn.add(b)
    return experts, ffn


def on_cpu(plan: Plan) -> set[str]:
    return {p.unit for p in plan.placements if p.compute == "cpu"}


FIT_RULE = re.compile(r"blk\\\.(\d+)\\\.ffn_(.*)=[^=]*$")
FIT_OVERFLOW = {"(gate|up|gate_up|down).*": "attn", "(gate|gate_up|down).*": "up", "down.*": "gate",
                "(up|down|gate_up|gate)_(ch|)exps": "moe"}


def fit_layout(printed: str, n_blocks: int) -> dict | None:
    """llama-fit-params' printed placement as sim.engines.llamacpp.fit's layout: -ngl (n_layer), its -ot rules' blocks the
    partial layers from the first to the output (n_part), the first rule's kind (which expert tensors it keeps on
    the GPU: fit.cpp's get_overflow_pattern); None when it printed no -ngl."""
    words = shlex.split(printed) if printed else []
    if "-ngl" not in words[:-1]:
        return None
    rules = [m.groups() for r in (words[words.index("-ot") + 1].split(",") if "-ot" in words[:-1] else [])
             if (m := FIT_RULE.match(r))]
    first = min((int(b) for b, _ in rules), default=None)
    kind = next((FIT_OVERFLOW.get(r, "?") for b, r in rules if int(b) == first), "moe")
    return {"n_layer": int(words[words.index("-ngl") + 1]), "n_part": n_blocks + 1 - first if rules else 0,
            "overflow": kind}


def fit_workload(fitted: dict, default: Workload | None = None) -> Workload | None:
    """One sequence filling the context llama-fit-params was given (its printed -c): the memory it fitted for;
    `default` where it printed none."""
    words = fitted.get("printed", "").split()
    if "-c" not in words[:-1]:
        return default
    return Workload(batch=1, prompt_tokens=max(int(words[words.index("-c") + 1]) - 1, 1), new_tokens=1)


FIT_MEM = re.compile(r"n_layer=\s*(\d+), n_part=\s*(\d+), overflow_type=(\d+), mem=\s*(\d+) MiB")


def fit_memory(entry: dict, shape: ModelShape, machine: MachineSpec) -> list[dict]:
    """llama.cpp's own projection of its GPU memory for each placement its --fit tried (llama-fit-params' trace:
    n_layer layers from the back, the output counted first; with overflow_type 4 the routed experts of the last
    n_part of them on the CPU, its -ot over all three expert tensors: the output, counted among them, has none),
    against sim.costs.memory.memory_use of that placement at the same context."""
    out, seen = [], set()
    for fitted in entry.get("fits", []):
        if "error" in fitted:
            continue
        w = fit_workload(fitted)
        for line in fitted.get("log", []) if w else []:
            m = FIT_MEM.search(line)
            if not m:
                continue
            ngl, part, overflow, mib = (int(g) for g in m.groups())
            if (ngl, part) in seen or (part and overflow != 4) or part > ngl:
                continue  # a partial layer's share of its experts (overflow_type 1-3) is not placed by the model
            seen.add((ngl, part))
            plan = llamacpp_ngl(shape, machine, w, budgets(machine), ngl,
                                cpu_expert_blocks=range(shape.n_blocks - max(part - 1, 0), shape.n_blocks))
            mem = memory_use(shape, plan, w, budgets(machine)).vram_bytes // 2**20  # whole MiB, as llama.cpp's
            out.append({"arch": entry["arch"], "file": entry.get("file"), "ngl": ngl, "n_part": part,
                        "llamacpp_mib": mib, "predicted_mib": mem, "diff_mib": mem - mib})
    return out


def fit_runs(entry: dict, shape: ModelShape, machine: MachineSpec) -> list[tuple[str, dict, PeerRun]]:
    """llama.cpp's own placement (--fit, h200_llamacpp.py --fit-shares) at a GPU budget, timed: each record twice,
    as 'fit' (the placement llama-fit-params printed, priced as run; a dense model's partial layer, its feed-forward
    on the CPU and its attention on the GPU, as 'fit_partial': not priced as run, the layer counted on the GPU) and as
    'fit_policy' (what offloadsim's `llamacpp` policy predicts at the budget llama.cpp fitted: its free memory as it
    saw it less the margin it was given, where it printed it)."""
    out = []
    for fitted in entry.get("fits", []):
        if "error" in fitted:
            continue
        seen = fitted.get("fit_free_mib")
        # (its CUDA context takes some of what nvidia-smi called free: small budgets can come out below nothing)
        vram = max((seen - fitted["margin_mib"]) * 2**20 if seen else fitted["budget_bytes"], 0)
        for rec in pooled(fitted["bench"]):
            # -ngl -1 (llama.cpp's default, printed when everything fits): every layer with the output
            rec = dict(rec, n_gpu_layers=rec["n_gpu_layers"] if rec["n_gpu_layers"] >= 0 else shape.n_blocks + 1)
            run = run_of(rec, shape, machine, None, "")
            experts, ffn = cpu_parts(shape, rec.get("args") or [])
            plan = llamacpp_ngl(shape, machine, run.workload, run.budgets, rec["n_gpu_layers"],
                                mapped=mapped_of(rec.get("args") or [], rec), cpu_expert_blocks=experts)
            label = f"llama.cpp --fit at {vram / 2**30:.1f} GiB"
            out.append(("fit_partial" if ffn else "fit", dict(rec, fit_budget_bytes=vram),
                        dataclasses.replace(run, label=f"{label}, as placed", plan=plan)))
            try:
                room = budgets(machine).model_copy(update={"vram_bytes": vram})
                fit_w = fit_workload(fitted, run.workload)
                policy, layout = fit_placement(shape, machine, fit_w, room)  # the llamacpp policy's placement
                check_plan(shape, policy, fit_w, room)
            except PlanError:  # the policy refuses a budget llama.cpp fitted: no prediction to compare
                continue
            differs = len(on_cpu(policy) ^ on_cpu(plan))  # units one computes on the CPU and the other not
            printed = fit_layout(fitted.get("printed", ""), shape.n_blocks)
            out.append(("fit_policy", dict(rec, fit_budget_bytes=vram, policy_differs=differs, layout=layout,
                                           layout_same=None if printed is None else printed == layout),
                        dataclasses.replace(run, label=f"{label}, the llamacpp policy's placement", plan=policy)))
    return out


def ngl_label(rec: dict) -> str:
    """A llama-bench record's setting as the report names it: '-ngl N', its -ncmoe and its other arguments."""
    return f"-ngl {rec['n_gpu_layers']}" + (f" -ncmoe {rec['n_cpu_moe']}" if rec.get("n_cpu_moe") else "") \
        + variant_of(rec.get("args") or [])


def variant_of(args: list[str]) -> str:
    """The llama-bench arguments of a setting besides its placement (-ngl N, -ncmoe N), e.g. ' -lm none'
    (h200_llamacpp.py --variant), or ''."""
    placement = ("-ngl", "-ncmoe", "--n-gpu-layers", "--n-cpu-moe")
    rest = [a for i, a in enumerate(args) if a not in placement and not (i and args[i - 1] in placement)]
    return " " + " ".join(rest) if rest else ""


FIT_PROMPT = 128  # the prompt length of the prefill run fitted


def is_calibration(kind: str, rec: dict, ngls: list[int]) -> bool:
    """Generation at the smallest -ngl (the head on the CPU after CPU layers), the middle one (layers alone on the
    CPU, from memory), the largest and the one below it (the CPU's speed from its last-level cache when that share
    fits it, the GPU's decode kernels), and the first prompt test at the largest (its prefill kernels against the
    GPU grid). Of the batched runs (`ngls`: theirs), several sequences at the smallest and the largest -ngl (the
    CPU's and the GPU's kernels on a step of several tokens, and from 32 sequences on ggml's offload of CPU-held
    weights) as the engine model prices them (one shared KV cache), and one sequence at the largest (its first decode
    steps warm the CUDA graph up, the rest replay it: the warm-up's cost per operator against the steady step)."""
    if kind not in ("ngl", "batched"):
        return False
    ranked = sorted(set(ngls))
    if kind == "batched":
        ngl, b = rec["n_gpu_layers"], rec["batch"]
        plain = rec.get("extra", "") in ("", "-kvu") and not rec.get("kv_per_sequence")
        return plain and (b > 1 and ngl in (ranked[0], ranked[-1]) or b == 1 and ngl == ranked[-1])
    middle = min(ranked, key=lambda n: abs(n - ranked[-1] / 2))
    if kind != "ngl" or rec["n_gpu_layers"] not in {ranked[0], middle, *ranked[-2:]}:
        return False
    return rec["n_gen"] > 0 or rec["n_gpu_layers"] == ranked[-1] and rec["n_prompt"] == FIT_PROMPT


def load(files: list[str]) -> list[tuple[dict, ModelShape, MachineSpec, list]]:
    out = []
    for f in files:
        doc = json.loads(Path(f).read_text())
        fa = flash_attention_build(doc.get("build") or {})
        for e in doc["archs"]:
            if "error" in e or "gguf_shape" not in e:
                continue
            shape = with_tensor_sizes(e, ModelShape.model_validate(e["gguf_shape"]))
            data = {k: v for k, v in e["profile"]["machine"].items() if k != "peers"}
            # every call ran on the same host; profiles written before the cache size was recorded lack it
            data["cpu"] = {**data["cpu"], "llc_bytes": data["cpu"].get("llc_bytes") or HOST.cpu.llc_bytes}
            machine = MachineSpec.model_validate(data)
            runs = [(kind, rec, dataclasses.replace(run, peer_update={**run.peer_update, "flash_attention": fa}))
                    for kind, rec, run in runs_of(e, shape, machine)]  # the build that ran them (its -fa: run_of)
            out.append((dict(e, file=Path(f).name, fa_build=fa), shape, machine, runs))
    return out


def kv_per_sequence(kind: str, rec: dict, run: PeerRun, shape: ModelShape) -> bool:
    """Several sequences, each with its own KV cache (llama.cpp's default for -np B; no -kvu), with any layer on the
    GPU: each sequence's attention then runs over its own cache padded to 256 cells, measured 25-60% slower than with
    one shared cache on a placement split between the devices (call N) and up to 2.4x slower on the GPU alone
    (call P: 48 sequences, 22.0 ms a step against 9.1), where the engine model prices the shared cache that
    --export llamacpp asks for and llama-server uses unless -np is given. With every layer on the CPU the two
    caches time alike (call P: 24 sequences, 128 ms against 131) below the step size from which ggml multiplies
    CPU-held weights on the GPU (the plan's gpu_offload_min_tokens); from it on, the sequences' own caches cost
    5-12% more there too (call P, 32 and 48 sequences). Reported apart, as not priced as run."""
    if not kind.endswith("batched") or rec["batch"] < 2 or "-kvu" in rec.get("extra", ""):
        return False
    t = run.plan.tiers()
    offload = run.plan.gpu_offload_min_tokens is not None and rec["batch"] >= run.plan.gpu_offload_min_tokens
    return offload or any(t[u.name].compute == "gpu" for u in shape.units if u.kind in ATTENTION_KINDS)


def ngls_of(runs: list, kind: str) -> list[int]:
    """The -ngl values of a kind of runs ('ngl' for the sweeps, 'batched' for llama-batched-bench's)."""
    return [r.get("n_gpu_layers") for k, r, _ in runs if k == ("batched" if kind == "batched" else "ngl")]


def on_gpu(run: PeerRun, shape: ModelShape) -> bool:
    """Every layer computed on the GPU: what a flash-attention build changes (its attention), and all that such a
    file fits (its CPU runs would refit the CPU's costs on one more call's host; call Z's timed it slow, Llama-1B
    at -ngl 0 34.6 ms a token against 29.8-31.8 in calls E-J)."""
    t = run.plan.tiers()
    return all(t[u.name].compute == "gpu" for u in shape.units if u.kind in ATTENTION_KINDS)


def fitted_on(e: dict, fit_on: list[str]) -> bool:
    return f"{e['file']}:{e['arch']}" in fit_on


def in_fit(e: dict, fit_on: list[str], kind: str, rec: dict, run: PeerRun, shape: ModelShape,
           ngls: list[int]) -> bool:
    """A run the engine's costs are fitted on: a calibration run of an architecture named by --fit, and of a
    flash-attention build's only those with every layer on the GPU (on_gpu)."""
    return fitted_on(e, fit_on) and is_calibration(kind, rec, ngls) and (not e["fa_build"] or on_gpu(run, shape))


def in_split_fit(e: dict, fit_split: tuple, kind: str, rec: dict, run: PeerRun, shape: ModelShape) -> bool:
    """A prompt test of 32 or more tokens of an architecture named by --fit-split, the model file mapped, with
    weights on the CPU (ggml copies them to the GPU split by split): what fits gpu_offload_split_prompt_s."""
    return f"{e['file']}:{e['arch']}" in fit_split and kind == "ngl" and rec["n_gen"] == 0 \
        and rec["n_prompt"] >= 32 and mapped_of(rec.get("args") or [], rec) \
        and any(p.compute == "cpu" for p in run.plan.placements if shape.unit(p.unit).kind != "embedding")


MOE_EXPERT_BOUNDS = (1e-10, 1e-5)  # seconds per routed expert of a GPU block per step


def in_moe_fit(e: dict, fit_moe: tuple, kind: str, rec: dict, run: PeerRun, shape: ModelShape) -> bool:
    """A generation test of an MoE named by --fit-moe with every layer on the GPU: what fits gpu_moe_expert_s."""
    return f"{e['file']}:{e['arch']}" in fit_moe and shape.is_moe and kind == "ngl" and rec["n_gen"] > 0 \
        and on_gpu(run, shape) and not cpu_experts(run, shape)


PINNED_SPLIT_BOUNDS = (1e-7, 1e-3)  # seconds per weight tensor of a pinned unit that the prefill offload copies


def in_pinned_fit(e: dict, fit_pinned: tuple, kind: str, rec: dict, run: PeerRun, shape: ModelShape) -> bool:
    """A prompt test of an architecture named by --fit-pinned with weights in pinned host buffers on the CPU (-lm
    none): what fits gpu_offload_split_pinned_s."""
    return f"{e['file']}:{e['arch']}" in fit_pinned and kind == "ngl" and rec["n_gen"] == 0 \
        and not mapped_of(rec.get("args") or [], rec) and any(p.tier == "ram_pinned" for p in run.plan.placements)


# costs fitted apart, each alone on the runs its option names, in this order (the rest as fitted): option, the
# PeerSpec field, its bounds, the runs it is fitted on
APART = (("fit_split", "gpu_offload_split_prompt_s", PINNED_SPLIT_BOUNDS, in_split_fit),
         ("fit_moe", "gpu_moe_expert_s", MOE_EXPERT_BOUNDS, in_moe_fit),
         ("fit_pinned", "gpu_offload_split_pinned_s", PINNED_SPLIT_BOUNDS, in_pinned_fit))


def in_apart_fit(apart: dict, e: dict, kind: str, rec: dict, run: PeerRun, shape: ModelShape) -> bool:
    """A run some cost fitted apart is fitted on (`apart`: option -> the FILE:ARCH it names)."""
    return any(test(e, apart.get(option, ()), kind, rec, run, shape) for option, _, _, test in APART)


def cpu_experts(run: PeerRun, shape: ModelShape) -> bool:
    """Some routed expert computed on the CPU (--n-cpu-moe, -ot ...exps=CPU, or a CPU layer of an MoE)."""
    t = run.plan.tiers()
    return any(t[u.name].compute == "cpu" for u in shape.units if u.kind == "expert")


PER_HOST = "one calibration run per call"


def cpu_bytes(run: PeerRun, shape: ModelShape) -> int:
    """The weights a run computes with on the CPU (the embedding's rows are looked up, not streamed)."""
    return sum(u.nbytes for u in shape.units if u.name in on_cpu(run.plan) and u.kind != "embedding")


def host_scales(loaded, spec) -> dict[str, tuple[float, tuple]]:
    """Per file (one call, one host): the CPU scale of llama.cpp's kernels (sim.engines.llamacpp.fitting.host_scaled)
    fitted on one run, the generation test that streams the most weights on the CPU, of any architecture of the
    call (-ngl 0 of its largest model where it has one: layers large enough that streaming, not per-operator costs,
    decides), the model file mapped and one sequence: (scale, (arch, run, test))."""
    best: dict[str, tuple] = {}
    for e, shape, machine, runs in loaded:
        for kind, rec, run in runs:
            if kind == "ngl" and rec["n_gen"] > 0 and mapped_of(rec.get("args") or [], rec) and \
                    run.workload.batch == 1 and cpu_bytes(run, shape) > best.get(e["file"], (0,))[0]:
                best[e["file"]] = (cpu_bytes(run, shape), e, shape, machine, rec, run)
    out = {}
    for f, (_, e, shape, machine, rec, run) in best.items():
        m = with_peer(machine, "llamacpp", spec)
        out[f] = (fit_host_scale("llamacpp", [(shape, m, run)]), (e["arch"], run.label, f"tg{rec['n_gen']}"))
    return out


def rows_of(loaded, spec, fit_on: list[str], scales: dict | None = None, apart: dict | None = None) -> list[dict]:
    """Every run predicted and measured. `scales`: per file, the host's CPU scale and the label of the run it was
    measured on (host_scales); that run then counts as a calibration run."""
    rows = []
    for e, shape, machine, runs in loaded:
        scale, label = (scales or {}).get(e["file"], (1.0, None))
        m = with_peer(machine, "llamacpp", host_scaled(spec, scale))
        for kind, rec, run in runs:
            ngls = ngls_of(runs, kind)
            s = predict(shape, m, run)
            gen = rec["n_gen"] > 0
            pred, meas = (s["time_per_token_s"], run.measured_tpot_s) if gen else (s["ttft_s"], run.measured_ttft_s)
            test = f"tg{rec['n_gen']}" if gen else f"pp{rec['n_prompt']}"
            rows.append({"file": e["file"], "fa_build": e.get("fa_build", False), "arch": e["arch"], "kind": kind,
                         "run": run.label,
                         "batch": run.workload.batch,
                         "test": f"B{run.workload.batch} {test}" if kind.endswith("batched") else test,
                         "ngl": rec["n_gpu_layers"],
                         "ot": rec.get("tensor_buft_overrides"), "threads": rec.get("n_threads"),
                         "calibration": in_fit(e, fit_on, kind, rec, run, shape, ngls)
                         or in_apart_fit(apart or {}, e, kind, rec, run, shape)
                         or (label is not None and (e["arch"], run.label, test) == label),
                         "moe": shape.is_moe, "cpu_experts": cpu_experts(run, shape), "hidden": shape.hidden,
                         "layers": shape.n_blocks,
                         # its tokens spread over the experts as a trained router's do (h200_llamacpp --embed-scale)
                         "spread_routing": shape.is_moe and e.get("embed_scale", 1.0) > 1,
                         "pinned": not mapped_of(rec.get("args") or [], rec),
                         "kv_per_sequence": rec.get("kv_per_sequence", False),
                         "policy_differs": rec.get("policy_differs"), "layout_same": rec.get("layout_same"),
                         "cpu_units": sum(p.compute == "cpu" for p in run.plan.placements),
                         "predicted_s": pred, "measured_s": meas, "error_pct": 100 * (pred / meas - 1),
                         "stddev_pct": 100 * rec["stddev_ns"] / rec["avg_ns"]})
    return rows


SLOW_HOST = 0.75  # a call's CPU grid below this share of the same unit's median over the calls: a contended host


def contended(loaded) -> set[str]:
    """Files whose call timed the host's CPU slower than the other calls timed the same unit: the batch-1 decode of
    the architecture's CPU decoder grid (calibrate's, pageable) below SLOW_HOST times its median over every call that
    has it. Elsewhere the same grid moved by at most 10% between calls (Llama-1B 34-38 GB/s, Llama-8B 42-46); call E
    timed Llama-1B's at 21 GB/s, and its llama.cpp runs were up to 50% slower than the same settings in other calls
    (lab/journal/peers.md, eighth session). Calls without a calibrate (--no-calibrate) are never flagged."""
    speeds: dict[str, list[tuple[str, float]]] = {}
    for e, *_ in loaded:
        grids = e["profile"]["machine"].get("compute_grids") or []
        g = next((g for g in grids if g["device"] == "cpu" and g["unit"]["kind"] == "decoder"
                  and g["memory"] == "pageable" and g["batch"][0] == 1), None)
        if g is not None:
            speed = g["unit"]["nbytes"] / statistics.median(g["decode_s"][0])
            speeds.setdefault(e["arch"], []).append((e["file"], speed))
    return {f for xs in speeds.values() if len(xs) > 1 for f, v in xs
            if v < SLOW_HOST * statistics.median(v for _, v in xs)}


def host_copy(loaded) -> dict[str, list[float]]:
    """Per file, the median of the host's 1 GiB RAM copies (GB/s, read + write) that h200_llamacpp.py timed before
    and after each architecture's runs: a busy host shows there (call T: 14.4 and 14.0 after; call R: 12.9 after one
    of its two; 18-22 in most calls) when its calibrate is skipped and its GEMV probe does not."""
    out: dict[str, list[float]] = {}
    for e, *_ in loaded:
        for key in ("host_before", "host_after"):
            speeds = (e.get(key) or {}).get("copy_bytes_per_s")
            if speeds:
                out.setdefault(e["file"], []).append(round(speeds[1] / 1e9, 1))
    return out


FA_BUILD = "flash-attention build"  # llama.cpp's default build (flash_attention_build), held out apart
FA_GROUPS = ("tg", "pp", "tg, shapes never fitted", "tg exported, -ngl form", "batched, B > 1",
             "batched, a KV cache per sequence on both devices (not priced as run)")

STEADY_PCT = 15  # runs whose repetitions (pooled over rounds) spread less than this: the host held still
MOE_GROUPS = ("tg", "pp", "tg, shapes never fitted", f"tg, run-to-run sd under {STEADY_PCT}%", "tg exported, -ngl form",
              "batched, B > 1")


FIT_KINDS = {"fit": "llama.cpp's --fit placement, as placed",
             "fit_partial": "llama.cpp's --fit placement with a partial layer (not priced as run)",
             "fit_policy": "llama.cpp's --fit, the llamacpp policy's placement at its budget"}
FIT_GROUPS = (*(f"tg {n}" for n in FIT_KINDS.values()), "fit placements the llamacpp policy chose alike")

EXPORT_PCT = 15  # an exported plan, run by its engine, within this share of the time predicted for it (issue 11)


def summarise(rows: list[dict], fitted_archs: set[str] = frozenset(), slow_hosts: set[str] = frozenset()) -> dict:
    """Median and worst error of the held-out runs: per test kind, per file, and the exported plans apart by their
    form (-ngl, as --export llamacpp writes it now, or every layer offloaded with -ot sending the first ones back,
    as it wrote before: those layers' KV cache stays on the GPU, which the engine model does not price)."""
    def stats(rs):
        errs = [abs(r["error_pct"]) for r in rs]
        return {"runs": len(errs), "median_abs_error_pct": statistics.median(errs) if errs else None,
                "worst_abs_error_pct": max(errs) if errs else None,
                f"within_{EXPORT_PCT}_pct": sum(e <= EXPORT_PCT for e in errs)}  # the bar for a plan
    held = [r for r in rows if not r["calibration"]]
    # what the engine model prices: llama-bench's own thread count, and the placements as exported
    priced = [r for r in held if r["kind"] in ("ngl", "exported")]
    out = {test: stats([r for r in priced if r["test"].startswith(test)]) for test in ("tg", "pp")}
    tg = [r for r in priced if r["test"].startswith("tg")]
    out["tg, calls not contended"] = stats([r for r in tg if r["file"] not in slow_hosts])
    out[f"tg, run-to-run sd under {STEADY_PCT}%"] = stats([r for r in tg if r["stddev_pct"] < STEADY_PCT])
    out["tg, shapes never fitted"] = stats([r for r in tg if r["arch"] not in fitted_archs])
    for f in sorted({r["file"] for r in rows}):
        out[f"tg {f}"] = stats([r for r in tg if r["file"] == f])
    exported = [r for r in tg if r["run"].startswith("exported")]
    out["tg exported, -ngl form"] = stats([r for r in exported if r["ngl"] != 999])
    out["tg exported, -ot form"] = stats([r for r in exported if r["ngl"] == 999])
    apart = [r for r in held if r.get("kv_per_sequence")]
    held = [r for r in held if not r.get("kv_per_sequence")]
    batched = [r for r in held if r["kind"] == "batched"]  # B sequences decoded together (llama-batched-bench)
    if any(r["kind"] == "exported_batched" for r in held):
        out["exported for B sequences"] = stats([r for r in held if r["kind"] == "exported_batched"])
    if apart:
        out["batched, a KV cache per sequence on both devices (not priced as run)"] = stats(apart)
    if batched:
        out["batched, every B"] = stats(batched)
        out["batched, B > 1"] = stats([r for r in batched if r["batch"] > 1])
        out[f"batched, B > 1, run-to-run sd under {STEADY_PCT}%"] = stats(
            [r for r in batched if r["batch"] > 1 and r["stddev_pct"] < STEADY_PCT])
        for b in sorted({r["batch"] for r in batched}):
            out[f"batched, B = {b}"] = stats([r for r in batched if r["batch"] == b])
        for f in sorted({r["file"] for r in batched}):
            out[f"batched, B > 1, {f}"] = stats([r for r in batched if r["batch"] > 1 and r["file"] == f])
    out.update(tools_gap(rows))
    for kind, name in FIT_KINDS.items():  # llama.cpp's own --fit placement at a budget
        fitted = [r for r in held if r["kind"] == kind and r["test"].startswith("tg")]
        if fitted:
            out[f"tg {name}"] = stats(fitted)
    fits = [r for r in held if r["kind"] == "fit_policy"]
    if fits:  # a budget too small for llama.cpp's compute buffer alone: --fit places -ngl 0 beyond it, the policy
        out["fit placements the llamacpp policy chose alike"] = {  # refuses (no fit_policy row)
            "runs": len(fits), "same": sum(r["policy_differs"] == 0 for r in fits),
            "units_apart": [r["policy_differs"] for r in fits],
            "layouts_alike": sum(bool(r.get("layout_same")) for r in fits),
            "refused": sum(r["kind"] in ("fit", "fit_partial") for r in held) - len(fits)}
    for kind in ("exported_ot", "threads"):  # not priced as run: the -ot form's KV on the GPU, other thread counts
        out[f"tg {kind} (not priced as run)"] = stats([r for r in held if r["kind"] == kind
                                                      and r["test"].startswith("tg")])
    return out


def tools_gap(rows: list[dict]) -> dict:
    """The two tools measured against each other, no model in between: one sequence decoded by llama-batched-bench
    (after its prompt, steps timed from the first) over llama-bench's generation (after its warm-up step) at the same
    -ngl, step count and call; median and range of the ratio less one, per step count."""
    bench = {(r["file"], r["arch"], r["ngl"], r["test"]): r["measured_s"] for r in rows
             if r["kind"] == "ngl" and r["test"].startswith("tg")}
    gaps: dict[str, list[float]] = {}
    for r in rows:
        if r["kind"] == "batched" and r["batch"] == 1 and "--no-op-offload" not in r["run"]:
            ref = bench.get((r["file"], r["arch"], r["ngl"], r["test"].split()[-1]))
            if ref:
                gaps.setdefault(r["test"].split()[-1], []).append(100 * (r["measured_s"] / ref - 1))
    return {f"one sequence, llama-batched-bench over llama-bench, {test}": {
        "runs": len(g), "median_pct": statistics.median(g), "min_pct": min(g), "max_pct": max(g)}
        for test, g in sorted(gaps.items())}


def sections(rows: list[dict], fitted_archs: set[str], slow: set[str], narrowest: int = 0) -> dict:
    """The held-out summary of every group: dense runs without flash attention, the flash-attention build's,
    the MoE runs, the pinned ones; and the dense generation tests of shapes at least as wide as the narrowest
    fitted (`narrowest`, its hidden size: what the fit has seen, where a narrower layer is an extrapolation)."""
    summary = summarise([r for r in rows if not r["fa_build"]], fitted_archs, slow)
    fa = [r for r in rows if r["fa_build"] and not r["moe"]]
    if fa:  # llama.cpp's default build, priced by the engine model fitted on the calls without flash attention
        summary.update({f"{FA_BUILD}, {k}": v for k, v in summarise(fa, fitted_archs, slow).items()
                        if k in FA_GROUPS + FIT_GROUPS or k.startswith("tg llamacpp-")})
        summary[f"{FA_BUILD}, tg, every layer on the GPU"] = summarise(
            [r for r in fa if r["cpu_units"] <= 1], fitted_archs, slow)["tg"]
    for build, name in ((False, "without flash attention"), (True, FA_BUILD)):  # priced as one shared cache
        summary[f"a KV cache per sequence, every layer on the GPU, {name}"] = summarise(
            [dict(r, kv_per_sequence=False) for r in rows if r["fa_build"] == build and r["kv_per_sequence"]
             and r["cpu_units"] <= 1], fitted_archs, slow).get("batched, B > 1")
    if narrowest:
        for build, name in ((False, ""), (True, f"{FA_BUILD}, ")):
            wide = [r for r in rows if r["fa_build"] == build and not r["moe"] and r["hidden"] >= narrowest]
            summary[f"{name}tg, as wide as a fitted shape (hidden >= {narrowest})"] = \
                summarise(wide, fitted_archs, slow)["tg"]
    moe = [r for r in rows if r["moe"]]
    if moe:  # llama.cpp's MoE runs (all from flash-attention builds so far), held out apart
        part = summarise(moe, fitted_archs, slow)
        summary.update({f"MoE, {k}": v for k, v in part.items()
                        if k in MOE_GROUPS + FIT_GROUPS or k.startswith("tg llamacpp-")})
        summary["MoE, tg, routed experts on the CPU"] = summarise(
            [r for r in moe if r["cpu_experts"]], fitted_archs, slow)["tg"]
        for spread, name in ((False, "the random checkpoint's few experts"), (True, "tokens spread over the experts")):
            part = summarise([r for r in moe if r["spread_routing"] == spread], fitted_archs, slow)
            summary.update({f"MoE, {name}, {k}": part[k] for k in ("tg", "pp")})
        for arch in sorted({r["arch"] for r in moe}):
            part = summarise([r for r in moe if r["arch"] == arch and r["spread_routing"]], fitted_archs, slow)
            summary.update({f"MoE {arch}, tokens spread, {k}": part[k] for k in ("tg", "pp") if part[k]["runs"]})
    pinned = [r for r in rows if r["pinned"]]
    if pinned:  # -lm none: the CPU's weights in pinned host buffers; the same placements mapped, beside them
        for name, part in (("pinned (-lm none)", pinned), ("mapped, the same calls", [
                r for r in rows if not r["pinned"] and r["file"] in {p["file"] for p in pinned}])):
            got = summarise(part, fitted_archs, slow)
            summary.update({f"CPU weights {name}, {k}": got[k] for k in ("tg", "pp")})
    return summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--json", default=None)
    ap.add_argument("--fit-split", action="append", default=None, metavar="FILE:ARCH",
                    help="an architecture of a file whose prompt tests of mapped CPU-held weights fit the split cost "
                         "of a prompt's step (gpu_offload_split_prompt_s; repeatable; default: none)")
    ap.add_argument("--fit-moe", action="append", default=None, metavar="FILE:ARCH",
                    help="an MoE architecture of a file whose generation tests with every layer on the GPU fit the "
                         "GPU's cost per routed expert of a block (gpu_moe_expert_s; repeatable; default: none)")
    ap.add_argument("--fit-pinned", action="append", default=None, metavar="FILE:ARCH",
                    help="an architecture of a file whose prompt tests of pinned weights (-lm none) fit the per-split "
                         "cost of pinned weights (gpu_offload_split_pinned_s; repeatable; default: none)")
    ap.add_argument("--fit", action="append", default=None, metavar="FILE:ARCH",
                    help="an architecture of a file to fit on (repeatable; default: the first of the first file)")
    a = ap.parse_args()
    loaded = load(a.files)
    fit_on = a.fit or [f"{loaded[0][0]['file']}:{loaded[0][0]['arch']}"]
    missing = set(fit_on) - {f"{e['file']}:{e['arch']}" for e, *_ in loaded}
    if missing:
        raise SystemExit(f"--fit {sorted(missing)[0]}: no such architecture in the files given; name it as "
                         "FILE:ARCH with the file's base name, e.g. llamacpp-a.json:llama-8b.")
    cal = [(shape, machine, run) for e, shape, machine, runs in loaded for kind, rec, run in runs
           if in_fit(e, fit_on, kind, rec, run, shape, ngls_of(runs, kind))]
    src = (f"[M] measured: fitted on {len(cal)} llama-bench runs of {', '.join(fit_on)} "
           f"({', '.join(r.label for _, _, r in cal)}) on the H200 test machine (lab/campaigns/h200_llamacpp.py, "
           "llamacpp_report.py)")
    # the costs fitted apart below start unmeasured, so the report depends on its inputs alone, not the preset's values
    spec = fit("llamacpp", cal).model_copy(update={"gpu_moe_expert_s": 0.0, "gpu_offload_split_pinned_s": None,
                                                        "gpu_offload_split_prompt_s": None})
    apart = {option: tuple(getattr(a, option) or ()) for option, *_ in APART}
    for option, field, bounds, test in APART:
        cal = [(shape, with_peer(machine, "llamacpp", spec), run) for e, shape, machine, runs in loaded
               for kind, rec, run in runs if test(e, apart[option], kind, rec, run, shape)]
        if cal:
            x = fit_scalar("llamacpp", cal, lambda v: spec.model_copy(update={field: v}), bounds)
            spec = spec.model_copy(update={field: x})
            print(f"{field} fitted on {len(cal)} runs ({', '.join(r.label for _, _, r in cal)}): {x:.3e}")
    print("llamacpp fitted:", {k: v for k, v in spec.model_dump().items() if isinstance(v, float)})
    rows = rows_of(loaded, spec, fit_on, apart=apart)
    print("| arch | run | test | -ngl | CPU units | used to fit | predicted / measured (s) | err | run-to-run sd |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        build = " (FA build)" if r["fa_build"] else ""
        print(f"| {r['arch']} | {r['run']}{build} | {r['test']} | {r['ngl']} | {r['cpu_units']} | "
              f"{'yes' if r['calibration'] else ''} | {r['predicted_s']:.4f} / {r['measured_s']:.4f} | "
              f"{r['error_pct']:+.1f}% | {r['stddev_pct']:.1f}% |")
    slow = contended(loaded)
    print("host RAM copy, GB/s median before and after each architecture:", host_copy(loaded))
    print("contended (their calibrate timed the host's CPU slow):", sorted(slow))
    fitted_archs = {f.split(":", 1)[1] for f in fit_on}
    narrowest = min(shape.hidden for e, shape, *_ in loaded if fitted_on(e, fit_on))
    summary = sections(rows, fitted_archs, slow, narrowest)
    # llama.cpp's CPU speed on each call's host from one of its runs (what a user's calibration run measures):
    # the generation test that streams the most weights on the CPU; every other run held out, priced with it
    scales = host_scales(loaded, spec)
    print("host CPU scale per call (its calibration run):", {f: (round(x, 3), lab) for f, (x, lab) in scales.items()})
    per_host = rows_of(loaded, spec, fit_on, scales, apart)
    summary.update({f"{PER_HOST}, {k}": v for k, v in sections(per_host, fitted_archs, slow, narrowest).items()
                    if k.split(", ")[-1] in ("tg", "pp") or "exported" in k or "--fit" in k or "as wide" in k})
    mem = [r for e, shape, machine, _ in loaded for r in fit_memory(e, shape, machine)]
    if mem:
        diffs = [abs(r["diff_mib"]) for r in mem]
        summary["llama.cpp's projected GPU memory (llama-fit-params), MiB off"] = {
            "placements": len(mem), "median_abs_mib": statistics.median(diffs), "worst_abs_mib": max(diffs),
            "within_8_mib": sum(d <= 8 for d in diffs), "worst": max(mem, key=lambda r: abs(r["diff_mib"]))}
    for group, v in summary.items():
        print(f"held out, {group}: {v}")
    if a.json:
        tmp = Path(a.json).with_suffix(".tmp")
        tmp.write_text(json.dumps({"fitted": spec.model_dump(), "held_out": summary, "rows": rows,
                                   "host_scales": scales, "rows_per_host": per_host}, indent=1))
        tmp.replace(a.json)  # atomic: an interrupted run leaves the previous summary whole


if __name__ == "__main__":
    main()
