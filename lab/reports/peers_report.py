"""Predicted against measured for the peer engines (issue 11), from files written by lab/campaigns/h200_peers.py.

For every recorded run it builds the plan the engine ran (Accelerate: from the device map Accelerate chose; AirLLM:
its one plan), fits each engine's host costs on its calibration runs only (each architecture's all-GPU, 60%- and
30%-budget batch-1 Accelerate runs, the last computing on the CPU, and its warm batch-1 AirLLM run:
validate/peer_calibration.py), predicts every other
run with those costs and the machine profile calibrated in the same call, and checks the placement model (our
`accelerate` policy given the same max_memory) against the map Accelerate chose.
Run: python lab/reports/peers_report.py lab/data/peers/peers-a.json [--json OUT]
     python lab/reports/peers_report.py lab/data/peers/peers-{b,c,d,e,g,h}.json --preset h200-testbox  (exported plans,
     priced today with the preset's costs)
     python lab/reports/peers_report.py lab/data/peers/peers-{n,o,p}.json --per-call  (each call's costs fitted on its
     own calibration runs, the held-out runs of all of them summarised together)
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path

from hwmodels.specs import MachineSpec
from validate.accuracy.hf_peers import big_budgets
from sim.engines import costs_of
from sim.plan import Budgets, Workload
from sim.engines.placements import POLICIES
from sim.engines.accelerate.placement import accelerate_tiers
from sim.engines.airllm.loader import airllm_loader_wait_s
from sim.run.schedule import build_schedule
from sim.model.shapes import ModelShape
from validate.accuracy import peers as accuracy_peers
from validate.peer_calibration import PeerRun, fit, predict, with_peer

# every architecture's runs of these kinds fit the costs; all other runs are held out
CALIBRATION = {("accelerate", "all GPU", 1), ("accelerate", "GPU 60%", 1), ("accelerate", "GPU 30%", 1), ("airllm", "warm", 1)}
# peer costs calibrate measures on the host, not fitted here (AirLLM's cleanup per module since the 23rd session:
# where a profile has it, every AirLLM run is held out)
MEASURED = accuracy_peers.MEASURED


def cleanup_measured(entry: dict) -> bool:
    """calibrate timed AirLLM's cleanup per module on that host (validate/module_cleanup.py)."""
    return accuracy_peers.cleanup_measured(entry["profile"])


def runs_of(entry: dict, shape: ModelShape, machine: MachineSpec) -> list[tuple[str, str, bool, PeerRun, dict]]:
    """(engine, kind, calibration?, run, extra) for every measured run of one architecture."""
    out = []
    big = big_budgets(machine)
    for r in entry["accelerate"]:
        if "error" in r or "skipped" in r:
            continue
        w = Workload(batch=r["batch"], prompt_tokens=r["prompt"], new_tokens=len(r["token_gaps_s"]) + 1, warm=True)
        # an empty map: every module on one device, the GPU where the model fits its budget (an exported plan: as
        # planned); the GPU's peak does not tell, as the harness's CUDA context holds ~0.6 GB (call M's 0.8 GB model)
        on_gpu = True if r["hf_device_map"] else \
            all(p["compute"] == "gpu" for p in r["exported"]["plan"]["placements"]) if "exported" in r else \
            int(r["max_memory"].get("0", 0)) >= shape.total_bytes
        plan = accuracy_peers.accelerate_plan(shape, machine, w, big, r["hf_device_map"], on_gpu)
        extra = {}
        if r.get("max_memory"):
            mm = r["max_memory"]
            bud = Budgets(vram_bytes=int(mm.get("0", 0)), ram_bytes=int(mm["cpu"]), pinned_bytes=0)
            extra["placement_matches"] = accelerate_tiers(shape, bud) == {k: v.tier for k, v in plan.tiers().items()}
        if "exported" in r:
            extra["exported_plan_prediction_s"] = r["exported"]["predicted_tpot_s"]
        if r.get("host_gbps") and entry.get("host_gbps"):  # the host's CPU speed before the run against after calibrate
            extra["host_vs_calibration"] = r["host_gbps"] / entry["host_gbps"]
        calib = ("accelerate", r["label"], r["batch"]) in CALIBRATION and r["prompt"] == 128
        out.append(("accelerate", r["label"], calib, PeerRun(r["label"], plan, w, big, r["time_per_token_s"], r["ttft_s"]), extra))
    for r in entry["airllm"]:
        if "error" in r:
            continue
        w = Workload(batch=r["batch"], prompt_tokens=r["prompt"], new_tokens=len(r["token_gaps_s"]) + 1)
        plan = POLICIES["airllm"](shape, machine, w, big)
        kind = "cold" if r["cold"] else "warm"
        calib = ("airllm", kind, r["batch"]) in CALIBRATION and not cleanup_measured(entry)
        extra = {}
        if r.get("phases"):  # AirLLM's own steps, timed in the run (lab/campaigns/h200_peers.py Phases)
            c = r["phases"]["clean_memory"]
            extra = {"cleanup_per_module_s": c["total_s"] / c["calls"], "gc_objects": r.get("gc_objects")}
        out.append(("airllm", kind, calib, PeerRun(kind, plan, w.model_copy(update={"warm": not r["cold"]}), big,
                                                     r["time_per_token_s"], r["ttft_s"]), extra))
    return out


def profile_machine(e: dict, peers: dict | None = None) -> MachineSpec:
    """The machine of a recorded architecture's calibrated profile with today's engine costs (or `peers`'
    Accelerate costs) and what calibrate measured of them (validate.accuracy.peers.hf_profile_machine)."""
    return accuracy_peers.hf_profile_machine(e["profile"], (peers or {}).get("accelerate"))


def abs_summary(errs: list[float]) -> dict:
    return {"runs": len(errs), "within_15pct": sum(abs(x) <= 15 for x in errs),
            "median_abs_error_pct": statistics.median(map(abs, errs)) if errs else None,
            "worst_abs_error_pct": max(map(abs, errs)) if errs else None}


def exported_runs(files: list[str], preset: str):
    """Every exported plan the files recorded, as `plan --engine accelerate` prices it today: (file, arch, run,
    shape, machine, plan, workload, budgets) with the call's calibrated profile and the preset's Accelerate costs
    (what calibrate measures of them taken from the profile)."""
    from hwmodels.presets import load_machine
    from sim.plan import Plan
    costs = {"accelerate": costs_of(load_machine(preset), "accelerate")}
    for f in files:
        for e in json.loads(Path(f).read_text())["archs"]:
            if "error" in e:
                continue
            shape, machine = ModelShape.model_validate(e["shape"]), profile_machine(e, costs)
            big = Budgets(vram_bytes=machine.gpu.vram_bytes, ram_bytes=100 * 2**30, pinned_bytes=50 * 2**30)
            for r in e["accelerate"]:
                if "exported" in r and "error" not in r:
                    w = Workload(batch=1, prompt_tokens=128, new_tokens=len(r["token_gaps_s"]) + 1, warm=True)
                    yield Path(f).name, e["arch"], r, shape, machine, Plan.model_validate(r["exported"]["plan"]), w, big


def per_plan_medians(runs: list[tuple[tuple, float, float]]) -> list[float]:
    """% errors of each plan's prediction against the median of its runs (h200_peers.py --export-rounds and
    --accelerate-rounds repeat the runs in rounds: a single run samples a host whose speed moves between runs).
    `runs`: (plan key, predicted s, measured s), a plan's predictions alike."""
    plans: dict[tuple, list] = {}
    for key, pred, meas in runs:
        plans.setdefault(key, [pred, []])[1].append(meas)
    return [100 * (pred / statistics.median(meas) - 1) for pred, meas in plans.values()]


def exported_with_preset(files: list[str], preset: str) -> dict:
    """Every exported plan the files recorded, predicted again as `plan --engine accelerate` would price it today
    (exported_runs). Prints a line per run; returns the summary."""
    from sim.run.simulate import fast_simulate
    errs, ttft, runs = [], [], []
    for name, arch, r, shape, machine, plan, w, big in exported_runs(files, preset):
        pred = fast_simulate(shape, machine, plan, w, big)
        errs.append(100 * (pred["time_per_token_s"] / r["time_per_token_s"] - 1))
        runs.append(((name, arch, r["label"]), pred["time_per_token_s"], r["time_per_token_s"]))
        ttft.append(100 * (pred["ttft_s"] / r["ttft_s"] - 1))
        print(f"{name} {arch} {r['label']}: predicted now {pred['time_per_token_s']:.4f} s "
              f"(at export {r['exported']['predicted_tpot_s']:.4f}), measured {r['time_per_token_s']:.4f}, "
              f"{errs[-1]:+.1f}%; first token {pred['ttft_s']:.3f} / {r['ttft_s']:.3f} s, {ttft[-1]:+.1f}%")
    out = abs_summary(errs)
    print(f"exported plans, predicted now with {preset}'s costs: {out}")
    print(f"their first tokens: {abs_summary(ttft)}")
    medians = abs_summary(per_plan_medians(runs))
    if medians["runs"] < len(runs):
        print(f"each plan against the median of its rounds: {medians}")
    return dict(out, first_token=abs_summary(ttft), median_of_rounds=medians)


def airllm_phases(files: list[str]) -> None:
    """What is left of each AirLLM run's error once its cleanup is the one it paid: predicted with `load_unit_s` set
    to the run's own `clean_memory` per module (a diagnostic, not a prediction), beside the steps its hooks timed
    per module (lab/campaigns/h200_peers.py Phases): the pre-hook (the wait for the loader thread, then the copy to the
    GPU), the copy alone (`move_layer_to_device`) and the loader's `load_layer_to_cpu`."""
    for f in files:
        for e in json.loads(Path(f).read_text())["archs"]:
            if "error" in e:
                continue
            shape, machine = ModelShape.model_validate(e["shape"]), profile_machine(e)
            runs = [x for x in runs_of(e, shape, machine) if x[0] == "airllm"]
            for (_, kind, _, run, _), r in zip(runs, [r for r in e["airllm"] if "error" not in r]):
                ph = r.get("phases")
                if not ph:
                    continue
                per = {k: v["total_s"] / v["calls"] for k, v in ph.items() if v["calls"]}
                own = with_peer(machine, "airllm", costs_of(machine, "airllm").model_copy(
                    update={"load_unit_s": per["clean_memory"]}))
                err = 100 * (predict(shape, own, run)["time_per_token_s"] / run.measured_tpot_s - 1)
                layer = max(u.nbytes for u in shape.units if u.kind == "decoder")
                dec = next(i for i, u in enumerate(shape.units) if u.kind == "decoder")
                copy = build_schedule(shape, machine, run.plan, run.workload, run.budgets).copy_s[dec]
                priced = airllm_loader_wait_s(shape.units[dec], machine, copy)
                print(f"{Path(f).name} {e['arch']} {kind} b{run.workload.batch}: with its own cleanup "
                      f"({per['clean_memory']:.3f} s a module) {err:+.1f}%; per module: pre-hook "
                      f"{1e3 * per['_pre_hook']:.1f} ms, of it the copy {1e3 * per['move_layer_to_device']:.1f} ms, "
                      f"the wait {1e3 * (per['_pre_hook'] - per['move_layer_to_device']):.1f} ms "
                      f"({1e3 * (per['_pre_hook'] - per['move_layer_to_device']) / (layer / 2**20):.3f} ms per "
                      f"MiB of a decoder); the loader {1e3 * per['load_layer_to_cpu']:.1f} ms. Priced for a decoder: "
                      f"the copy {1e3 * copy:.1f} ms, the wait {1e3 * priced:.1f} ms, the pre-hook "
                      f"{1e3 * (copy + priced):.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--json", default=None)
    ap.add_argument("--preset", default=None, help="only: the exported plans priced today with this preset's costs")
    ap.add_argument("--airllm-phases", action="store_true",
                    help="only: each AirLLM run predicted with its own cleanup per module, beside its timed steps")
    ap.add_argument("--per-call", action="store_true",
                    help="fit each file's (each call's) host costs on its own calibration runs, as a user calibrates "
                         "on their own machine, instead of one fit over every file given")
    a = ap.parse_args()
    if a.preset:
        exported_with_preset(a.files, a.preset)
        return
    if a.airllm_phases:
        airllm_phases(a.files)
        return
    archs = []
    for f in a.files:
        for e in json.loads(Path(f).read_text())["archs"]:
            if "error" not in e:
                archs.append(dict(e, file=Path(f).name))
    loaded = []
    for e in archs:
        shape, machine = ModelShape.model_validate(e["shape"]), profile_machine(e)
        loaded.append((e, shape, machine, runs_of(e, shape, machine)))
    names = [Path(f).name for f in a.files]
    groups = [[f] for f in names] if a.per_call else [names]
    specs = {}  # (engine, file): the costs fitted on the calibration runs of the file's group
    for engine, group in itertools.product(("accelerate", "airllm"), groups):
        cal = [(shape, machine, r) for e, shape, machine, runs in loaded if e["file"] in group
               for eng, _, c, r, _ in runs if eng == engine and c]
        spec = None  # not measured in these files, or (AirLLM) every cost measured by calibrate
        if cal:
            src = (f"measured: fitted on {len(cal)} {engine} runs ({', '.join(r.label for _, _, r in cal)}) on the "
                   f"H200 test machine ({', '.join(group)}; lab/campaigns/h200_peers.py, peers_report.py)")
            spec = fit(engine, cal)
            print(engine, "fitted" + (f" ({group[0]})" if a.per_call else "") + ":",
                  {k: v for k, v in spec.model_dump().items() if isinstance(v, float) and v})
        specs.update({(engine, f): spec for f in group})
    rows, held, held_ttft = [], {"accelerate": [], "airllm": []}, {"accelerate": [], "airllm": []}
    for e, shape, machine, runs in loaded:
        for engine, kind, calib, run, extra in runs:
            measured = MEASURED[engine] if engine == "accelerate" or cleanup_measured(e) else ()
            spec = specs[engine, e["file"]]
            m = machine if spec is None else with_peer(machine, engine, spec.model_copy(
                update={k: getattr(costs_of(machine, engine), k) for k in measured}))
            s = predict(shape, m, run)
            err = 100 * (s["time_per_token_s"] / run.measured_tpot_s - 1)
            ttft_err = 100 * (s["ttft_s"] / run.measured_ttft_s - 1)
            where = sorted({p.tier + ("/cpu" if p.compute == "cpu" else "") for p in run.plan.placements})
            rows.append({"file": e["file"], "arch": e["arch"], "layers": shape.n_blocks, "engine": engine, "run": kind,
                         "batch": run.workload.batch,
                         "prompt": run.workload.prompt_tokens, "tiers": where, "calibration": calib,
                         "predicted_tpot_s": s["time_per_token_s"], "measured_tpot_s": run.measured_tpot_s,
                         "error_pct": err, "predicted_ttft_s": s["ttft_s"], "measured_ttft_s": run.measured_ttft_s,
                         "ttft_error_pct": ttft_err, **extra})
            if not calib:
                held[engine].append(abs(err))
                held_ttft[engine].append(ttft_err)
    print("| arch | engine | run | batch | prompt | placement | used to fit | tpot pred / meas (s) | err | TTFT pred / meas (s) | err | our placement = Accelerate's |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        pm = r.get("placement_matches", "")
        print(f"| {r['arch']} | {r['engine']} | {r['run']} | {r['batch']} | {r['prompt']} | {', '.join(r['tiers'])} | "
              f"{'yes' if r['calibration'] else ''} | {r['predicted_tpot_s']:.4f} / {r['measured_tpot_s']:.4f} | "
              f"{r['error_pct']:+.1f}% | {r['predicted_ttft_s']:.3f} / {r['measured_ttft_s']:.3f} | "
              f"{r['ttft_error_pct']:+.1f}% | {pm if isinstance(pm, str) else ('yes' if pm else 'no')} |")
    drift = [r for r in rows if "host_vs_calibration" in r]
    if drift:  # calls from the twenty-fourth session on: a CPU run's miss against how far the host moved
        print("host's CPU speed before each Accelerate run against after calibration (GEMV over 256 MiB):")
        for r in drift:
            print(f"  {r['arch']} {r['run']} b{r['batch']}: host x{r['host_vs_calibration']:.2f}, "
                  f"error {r['error_pct']:+.1f}%")
    summary = {k: {"runs": len(v), "median_abs_error_pct": statistics.median(v) if v else None,
                   "worst_abs_error_pct": max(v) if v else None} for k, v in held.items()}
    # an exported plan against what `plan --engine accelerate` predicted for it when it was exported
    exp = [100 * (r["exported_plan_prediction_s"] / r["measured_tpot_s"] - 1) for r in rows
           if "exported_plan_prediction_s" in r]
    summary["exported plans, against plan --engine"] = abs_summary(exp)
    own = [((r["file"], r["arch"], r["run"], r["batch"], r["prompt"]), r["predicted_tpot_s"], r["measured_tpot_s"])
           for r in rows
           if r["engine"] == "accelerate" and not r["calibration"] and "exported_plan_prediction_s" not in r]
    if len(per_plan_medians(own)) < len(own):  # h200_peers.py --accelerate-rounds
        summary["accelerate, median of rounds"] = abs_summary(per_plan_medians(own))
    rounds = [((r["file"], r["arch"], r["run"]), r["exported_plan_prediction_s"], r["measured_tpot_s"]) for r in rows
              if "exported_plan_prediction_s" in r]
    if len(per_plan_medians(rounds)) < len(rounds):
        summary["exported plans, against plan --engine, median of rounds"] = abs_summary(per_plan_medians(rounds))
    for engine, errs in held_ttft.items():
        summary[f"{engine} first token"] = abs_summary(errs)
    # AirLLM's first token with the page cache dropped: its loader faults the shards in (airllm_cold_waits)
    summary["airllm cold first token"] = abs_summary([r["ttft_error_pct"] for r in rows
                                                      if r["engine"] == "airllm" and r["run"] == "cold"])
    for k, v in summary.items():
        print(f"{k}: held-out runs {v['runs']}, median |error| {v['median_abs_error_pct']}, "
              f"worst {v['worst_abs_error_pct']}" + (f", within 15%: {v['within_15pct']}" if "within_15pct" in v else ""))
    if a.json:
        tmp = Path(a.json).with_suffix(".tmp")
        tmp.write_text(json.dumps({"fitted": {f"{engine} {f}": v.model_dump() for (engine, f), v in specs.items() if v},
                                   "held_out": summary, "rows": rows}, indent=1))
        tmp.replace(a.json)  # atomic: an interrupted run leaves the previous summary whole


if __name__ == "__main__":
    main()
