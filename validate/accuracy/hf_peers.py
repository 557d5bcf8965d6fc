"""Accelerate and AirLLM (lab/campaigns/h200_peers.py): each recorded run's plan rebuilt (Accelerate: from the device
map it chose; AirLLM: its one plan), each call's host costs fitted on that call's calibration runs only (every
architecture's all-GPU, 60%- and 30%-budget batch-1 Accelerate runs at a 128-token prompt, and its warm batch-1
AirLLM run unless calibrate timed AirLLM's cleanup on that host), every other run held out and predicted on the
profile calibrated in the same call. The exported plans (`plan --export accelerate`, then run by Accelerate) are
priced again as `plan --engine accelerate` prices them today: the call's profile with the preset's Accelerate costs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload
from sim.run.simulate import fast_simulate
from validate.accuracy import peers
from validate.accuracy.records import Row, call_date, read_call

ACCELERATE = "Accelerate"
AIRLLM = "AirLLM"
EXPORTED = "exported plans, run by the engine they were exported for"
CALIBRATION = {("accelerate", "all GPU", 1), ("accelerate", "GPU 60%", 1), ("accelerate", "GPU 30%", 1),
               ("airllm", "warm", 1)}


@dataclass(frozen=True)
class Run:
    """A recorded peer run: its engine, its kind ('GPU 60%', 'warm', ...), whether it calibrates, the run itself."""
    engine: str
    kind: str
    calibration: bool
    run: peers.PeerRun
    exported: dict | None  # the exported plan it ran, where it ran one


def big_budgets(machine) -> Budgets:
    return Budgets(vram_bytes=machine.gpu.vram_bytes, ram_bytes=100 * 2**30, pinned_bytes=50 * 2**30)


def accelerate_runs(entry: dict, shape: ModelShape, machine) -> list[Run]:
    out, big = [], big_budgets(machine)
    for r in entry["accelerate"]:
        if "error" in r or "skipped" in r:
            continue
        w = Workload(batch=r["batch"], prompt_tokens=r["prompt"], new_tokens=len(r["token_gaps_s"]) + 1, warm=True)
        # an empty map: every module on one device, the GPU where the model fits its budget (an exported plan: as
        # planned)
        on_gpu = True if r["hf_device_map"] else \
            all(p["compute"] == "gpu" for p in r["exported"]["plan"]["placements"]) if "exported" in r else \
            int(r["max_memory"].get("0", 0)) >= shape.total_bytes
        plan = peers.accelerate_plan(shape, machine, w, big, r["hf_device_map"], on_gpu)
        calib = ("accelerate", r["label"], r["batch"]) in CALIBRATION and r["prompt"] == 128
        run = peers.PeerRun(r["label"], plan, w, big, r["time_per_token_s"], r["ttft_s"])
        out.append(Run("accelerate", r["label"], calib, run, r.get("exported")))
    return out


def airllm_runs(entry: dict, shape: ModelShape, machine) -> list[Run]:
    out, big = [], big_budgets(machine)
    for r in entry["airllm"]:
        if "error" in r:
            continue
        w = Workload(batch=r["batch"], prompt_tokens=r["prompt"], new_tokens=len(r["token_gaps_s"]) + 1)
        plan = peers.airllm_plan(shape, machine, w, big)
        kind = "cold" if r["cold"] else "warm"
        calib = ("airllm", kind, r["batch"]) in CALIBRATION and not peers.cleanup_measured(entry["profile"])
        run = peers.PeerRun(kind, plan, w.model_copy(update={"warm": not r["cold"]}), big, r["time_per_token_s"],
                            r["ttft_s"])
        out.append(Run("airllm", kind, calib, run, None))
    return out


def _call_rows(doc: dict, file: str) -> list[Row]:
    """The rows of one call: each engine's costs fitted on the call's own calibration runs."""
    loaded = []
    for e in doc["archs"]:
        if "error" in e:
            continue
        shape, machine = ModelShape.model_validate(e["shape"]), peers.hf_profile_machine(e["profile"])
        loaded.append((e, shape, machine, accelerate_runs(e, shape, machine) + airllm_runs(e, shape, machine)))
    specs = {}
    for engine in ("accelerate", "airllm"):
        cal = [(shape, m, x.run) for _, shape, m, runs in loaded for x in runs if x.engine == engine and x.calibration]
        specs[engine] = peers.fit_hf(engine, cal) if cal else None
    rows = []
    for e, shape, machine, runs in loaded:
        for x in runs:
            m = peers.with_fitted(machine, x.engine, specs[x.engine], e["profile"])
            s = peers.predict_run(shape, m, x.run)
            w = x.run.workload
            family = EXPORTED if x.exported else ACCELERATE if x.engine == "accelerate" else AIRLLM
            if x.exported:  # priced below as `plan --engine accelerate` prices it
                continue
            rows.append(Row(family=family, slice=_slice(x), file=file, date=call_date(doc), arch=e["arch"],
                            label=x.kind, tpot_pred_s=s["time_per_token_s"], tpot_meas_s=x.run.measured_tpot_s,
                            ttft_pred_s=s["ttft_s"], ttft_meas_s=x.run.measured_ttft_s, held_out=not x.calibration,
                            setting=(file, e["arch"], shape.n_blocks, x.kind, w.batch, w.prompt_tokens)))
    return rows


def _slice(x: Run) -> str:
    if x.engine == "airllm":
        return "page cache dropped (cold)" if x.kind == "cold" else "warm page cache"
    return "every module on the GPU" if x.kind == "all GPU" else "modules offloaded to RAM or disk"


def exported_rows(doc: dict, file: str) -> list[Row]:
    """Every exported plan the call ran, predicted as `plan --engine accelerate` prices it today."""
    costs = peers.preset_accelerate_costs()
    rows = []
    for e in doc["archs"]:
        if "error" in e:
            continue
        shape, machine = ModelShape.model_validate(e["shape"]), peers.hf_profile_machine(e["profile"], costs)
        for r in e["accelerate"]:
            if "exported" not in r or "error" in r or "skipped" in r:
                continue
            w = Workload(batch=1, prompt_tokens=128, new_tokens=len(r["token_gaps_s"]) + 1, warm=True)
            s = fast_simulate(shape, machine, Plan.model_validate(r["exported"]["plan"]), w, big_budgets(machine))
            rows.append(Row(family=EXPORTED, slice="Accelerate", file=file, date=call_date(doc),
                            arch=e["arch"], label=r["label"], tpot_pred_s=s["time_per_token_s"],
                            tpot_meas_s=r["time_per_token_s"], ttft_pred_s=s["ttft_s"], ttft_meas_s=r["ttft_s"],
                            held_out=True, setting=(file, e["arch"], shape.n_blocks, r["label"], 1, 128)))
    return rows


def read_hf_peers(paths: list[Path]) -> list[Row]:
    """The rows of every Accelerate, AirLLM and exported-plan run of the calls, each call fitted on its own."""
    rows = []
    for path in paths:
        doc = read_call(path)
        rows += _call_rows(doc, Path(path).name) + exported_rows(doc, Path(path).name)
    return rows


