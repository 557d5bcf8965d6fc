"""llama.cpp's recorded runs re-predicted: the engine's costs fitted on the calibration runs of the architectures
named (generation at the smallest -ngl, the middle one, the largest and the one below it, the 128-token prompt at
the largest; several sequences at the smallest and the largest batched -ngl and one sequence at the largest; of a
flash-attention build only those with every layer on the GPU), three costs each fitted alone on runs of their own
(prompt tests of mapped CPU weights, generation of an MoE on the GPU, prompt tests of pinned weights); every other
run held out and predicted on the profile calibrated in its own call."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from sim.costs.tiers import tier_row
from sim.model.shapes import ATTENTION_KINDS
from validate.accuracy import peers
from validate.accuracy.llamacpp_runs import Arch, BenchRun, load
from validate.accuracy.records import Row

ONE = "llama.cpp, one sequence"
SEVERAL = "llama.cpp, several sequences"
EXPORTED = "exported plans, run by the engine they were exported for"
FIT_PROMPT = 128


@dataclass(frozen=True)
class FitNames:
    """'FILE:ARCH' names of the architectures whose runs fit llama.cpp's costs: `fit` the calibration runs,
    `split`, `moe`, `pinned` the costs fitted apart."""
    fit: tuple[str, ...]
    split: tuple[str, ...] = ()
    moe: tuple[str, ...] = ()
    pinned: tuple[str, ...] = ()


def _name(a: Arch) -> str:
    return f"{a.entry['file']}:{a.entry['arch']}"


def on_gpu(x: BenchRun, a: Arch) -> bool:
    t = x.run.plan.tiers()
    return all(t[u.name].compute == "gpu" for u in a.shape.units if u.kind in ATTENTION_KINDS)


def is_calibration(x: BenchRun, ngls: list[int]) -> bool:
    if x.kind not in ("ngl", "batched"):
        return False
    ranked = sorted(set(ngls))
    rec = x.rec
    if x.kind == "batched":
        ngl, b = rec["n_gpu_layers"], rec["batch"]
        plain = rec.get("extra", "") in ("", "-kvu") and not rec.get("kv_per_sequence")
        return plain and (b > 1 and ngl in (ranked[0], ranked[-1]) or b == 1 and ngl == ranked[-1])
    middle = min(ranked, key=lambda n: abs(n - ranked[-1] / 2))
    if rec["n_gpu_layers"] not in {ranked[0], middle, *ranked[-2:]}:
        return False
    return rec["n_gen"] > 0 or rec["n_gpu_layers"] == ranked[-1] and rec["n_prompt"] == FIT_PROMPT


def _ngls(a: Arch, kind: str) -> list[int]:
    return [x.rec["n_gpu_layers"] for x in a.runs if x.kind == ("batched" if kind == "batched" else "ngl")]


def in_fit(a: Arch, x: BenchRun, names: FitNames) -> bool:
    return _name(a) in names.fit and is_calibration(x, _ngls(a, x.kind)) and \
        (not a.entry["fa_build"] or on_gpu(x, a))


def _cpu_units(x: BenchRun, a: Arch, kinds: tuple[str, ...]) -> bool:
    return any(p.compute == "cpu" for p in x.run.plan.placements if a.shape.unit(p.unit).kind in kinds)


def apart_field(a: Arch, x: BenchRun, names: FitNames) -> str | None:
    """The cost fitted apart that this run fits, if any (a prompt test of mapped CPU weights, an MoE's generation
    with every layer and expert on the GPU, a prompt test of pinned weights)."""
    if x.kind != "ngl":
        return None
    rec, args = x.rec, x.rec.get("args") or []
    mapped = peers.mapped_of(args, rec)
    dense_kinds = tuple({u.kind for u in a.shape.units} - {"embedding"})
    if _name(a) in names.split and rec["n_gen"] == 0 and rec["n_prompt"] >= 32 and mapped \
            and _cpu_units(x, a, dense_kinds):
        return "gpu_offload_split_prompt_s"
    if _name(a) in names.moe and a.shape.is_moe and rec["n_gen"] > 0 and on_gpu(x, a) \
            and not _cpu_units(x, a, ("expert",)):
        return "gpu_moe_expert_s"
    if _name(a) in names.pinned and rec["n_gen"] == 0 and not mapped \
            and any(tier_row(p.tier).pinned_home for p in x.run.plan.placements):
        return "gpu_offload_split_pinned_s"
    return None


def fitted_costs(archs: list[Arch], names: FitNames):
    cal = [(a.shape, a.machine, x.run) for a in archs for x in a.runs if in_fit(a, x, names)]
    apart: dict[str, list] = {}
    for a in archs:
        for x in a.runs:
            field = apart_field(a, x, names)
            if field:
                apart.setdefault(field, []).append((a.shape, a.machine, x.run))
    return peers.fit_llamacpp(cal, apart)


def family_of(a: Arch, x: BenchRun) -> tuple[str, str] | None:
    """(family, slice) of a held-out run, or None for what the engine model does not price as run (several
    sequences each with its own KV cache, an exported plan of the -ot form)."""
    build = "flash-attention build (as shipped)" if a.entry["fa_build"] else "build without flash-attention kernels"
    kind = "MoE" if a.shape.is_moe else "dense"
    if x.rec.get("kv_per_sequence"):
        return None
    if x.kind == "exported":
        return (EXPORTED, f"llama.cpp, {kind}, {build}") if x.rec["n_gpu_layers"] != 999 else None
    if x.kind == "exported_batched":
        return EXPORTED, "llama.cpp, several sequences"
    if x.kind == "batched":
        return (SEVERAL, f"{kind}, {build}") if x.run.workload.batch > 1 else None
    return ONE, f"{kind}, {build}, " + ("generation" if x.rec["n_gen"] > 0 else "prompt")


def rows_of(archs: list[Arch], spec, names: FitNames) -> list[Row]:
    rows = []
    for a in archs:
        m = peers.with_llamacpp(a.machine, spec)
        for x in a.runs:
            fam = family_of(a, x)
            if fam is None:
                continue
            s = peers.predict_run(a.shape, m, x.run)
            gen = x.rec["n_gen"] > 0
            nan = float("nan")
            held = not (in_fit(a, x, names) or apart_field(a, x, names))
            test = f"tg{x.rec['n_gen']}" if gen else f"pp{x.rec['n_prompt']}"
            rows.append(Row(family=fam[0], slice=fam[1], file=a.entry["file"], date=a.entry["date"],
                            arch=a.entry["arch"], label=f"{x.run.label} {test}",
                            tpot_pred_s=s["time_per_token_s"] if gen else nan,
                            tpot_meas_s=x.run.measured_tpot_s if gen else nan,
                            ttft_pred_s=nan if gen else s["ttft_s"], ttft_meas_s=nan if gen else x.run.measured_ttft_s,
                            held_out=held, setting=(a.entry["file"], a.entry["arch"], a.shape.n_blocks, x.kind,
                                                    x.run.label, test, x.run.workload.batch)))
    return rows


def read_llamacpp(paths: list[Path], names: FitNames) -> tuple[list[Row], dict[tuple, list[float]]]:
    """The rows of every priced llama.cpp run, and each setting's round times (for the repeat floor)."""
    archs = load(paths)
    rows = rows_of(archs, fitted_costs(archs, names), names)
    rounds = {}
    for a in archs:
        for x in a.runs:
            test = f"tg{x.rec['n_gen']}" if x.rec["n_gen"] > 0 else f"pp{x.rec['n_prompt']}"
            if len(x.rounds_s) > 1 and not any(math.isnan(t) for t in x.rounds_s):
                rounds[(a.entry["file"], a.entry["arch"], a.shape.n_blocks, x.kind, x.run.label, test,
                        x.run.workload.batch)] = list(x.rounds_s)
    return rows, rounds
