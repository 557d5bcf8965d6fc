"""How far the same setting moves when the H200 host times it again: the floor under any prediction's worst error
(issue 11's figures: a peer's time per token within 15% median, 25% worst, on runs not used to calibrate).

A setting timed several times (llama.cpp: each round of a call's --rounds, and the same shape, placement and test in
another call; Accelerate and AirLLM: each round of h200_peers.py's rounds, and the same run in another call) has
times t_min..t_max. One number predicts them all at best within (t_max - t_min) / (t_max + t_min) (the prediction
halfway in ratio between them): that is the group's floor, a bound no model of the engine can beat on those runs,
since the inputs (shape, placement, machine profile, engine costs) are the same. The rounds of one call share even
the call's own calibration, so their floor binds a per-call calibrated prediction too.

Beside the floors, each held-out run the model misses by more than --miss percent is checked against the other
timings of its setting: whether one of them lies within 15% of the run's prediction (the engine model right for
that setting on a host that held still, the run itself in a slow or a fast spell). And the held-out runs whose
setting was timed again and reproduced (its timings within a 10% floor: chosen by the measurements alone, never by
the prediction) are summarised apart: the model's error where the host held still.

Inputs are the reports' --json outputs (the per-run predictions) and, for llama.cpp's rounds, the calls themselves:
    python lab/reports/repeat_floor.py --llamacpp-report lc.json --llamacpp-calls lab/data/peers/llamacpp-*.json \\
        --peers-report peers.json [--json OUT]
where lc.json is lab/reports/llamacpp_report.py's --json over the calls (its command in its docstring) and
peers.json lab/reports/peers_report.py's --json with --per-call over lab/data/peers/peers-{b..w}.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from lab.reports.llamacpp_report import ngl_label
from sim.engines.llamacpp.bench import median_time_s
from validate.accuracy.errors import floor_pct

AGREE_PCT = 15.0  # another timing of the setting within this of the prediction: the model agrees with a repeat
STEADY_FLOOR_PCT = 10.0  # a setting whose timings lie within this floor of each other reproduced: the host held still


def per_token(rec: dict) -> tuple[str, float]:
    """A llama-bench record's test and time (its median repetition): per token for a generation test, the prompt's
    time for a prompt test."""
    t = median_time_s(rec)
    return (f"tg{rec['n_gen']}", t / rec["n_gen"]) if rec["n_gen"] > 0 else (f"pp{rec['n_prompt']}", t)


def llamacpp_rounds(files: list[str]) -> dict[tuple, list[float]]:
    """(file, arch, layers, run label as the report names it, test) -> each round's time, for the one-sequence
    settings a call timed in several rounds (-ngl sweeps and exported plans, llama-bench's own thread count; a call
    may cut one shape to two layer counts)."""
    out: dict[tuple, list[float]] = {}
    for f in files:
        for e in read_json(f, "--llamacpp-calls", "archs", "a file lab/campaigns/h200_llamacpp.py wrote")["archs"]:
            if "error" in e or "gguf_shape" not in e:
                continue
            recs = [(rec, ngl_label(rec)) for rec in e["llamacpp"] if "avg_ns" in rec
                    and rec.get("kind", "ngl") == "ngl" and not {"-t", "--threads"} & set(rec.get("args") or [])]
            recs += [(rec, f"exported plan, GPU {exp['fraction']:.0%}") for exp in e["exported"]
                     if "error" not in exp and exp.get("batch", 1) == 1 for rec in exp["bench"] if "avg_ns" in rec]
            for rec, label in recs:
                test, t = per_token(rec)
                out.setdefault((Path(f).name, e["arch"], e["gguf_shape"]["n_blocks"], label, test), []).append(t)
    return {k: v for k, v in out.items() if len(v) > 1}


def summary(floors: list[float]) -> dict:
    return {"settings": len(floors), "median_floor_pct": statistics.median(floors) if floors else None,
            "worst_floor_pct": max(floors) if floors else None,
            "over_15_pct": sum(f > 15 for f in floors), "over_25_pct": sum(f > 25 for f in floors)}


def misses(rows: list[dict], repeats: dict, key_of, miss_pct: float) -> dict:
    """The held-out runs missed by more than miss_pct, and of those the ones whose setting was timed again
    (`repeats`: key_of(row) -> every timing of its setting, the row's own among them) with one timing within
    AGREE_PCT of the row's prediction."""
    missed = [r for r in rows if abs(r["error_pct"]) > miss_pct]
    repeated = [r for r in missed if len(repeats.get(key_of(r), ())) > 1]
    agree = [r for r in repeated if any(abs(r["pred"] / t - 1) <= AGREE_PCT / 100 for t in repeats[key_of(r)])]
    steady = [abs(r["error_pct"]) for r in rows
              if len(repeats.get(key_of(r), ())) > 1 and floor_pct(repeats[key_of(r)]) <= STEADY_FLOOR_PCT]
    return {"held_out": len(rows), f"missed_over_{miss_pct:g}_pct": len(missed), "timed_again": len(repeated),
            f"a_timing_within_{AGREE_PCT:g}_pct_of_the_prediction": len(agree),
            f"runs of settings timed again that reproduced (floor <= {STEADY_FLOOR_PCT:g}%)": {
                "runs": len(steady), "median_abs_error_pct": statistics.median(steady) if steady else None,
                "worst_abs_error_pct": max(steady) if steady else None, "within_15_pct": sum(e <= 15 for e in steady)},
            "runs": [f"{r['file']} {r['arch']} {r['run']} {r['test']}: {r['error_pct']:+.1f}%, timings "
                     + ", ".join(f"{1e3 * t:.2f}" for t in sorted(repeats.get(key_of(r), ()))) + " ms, predicted "
                     + f"{1e3 * r['pred']:.2f} ms" for r in missed]}


def llamacpp(report: dict, calls: list[str], miss_pct: float) -> dict:
    """The floors of llama.cpp's one-sequence generation tests within a call (rounds) and across calls (the same
    build, shape, layer count, placement and test), and the model's misses against them."""
    rows = [dict(r, pred=r["predicted_s"]) for r in report["rows"]
            if r["kind"] in ("ngl", "exported") and r["test"].startswith("tg") and r["batch"] == 1]
    rounds = {k: v for k, v in llamacpp_rounds(calls).items() if k[4].startswith("tg")}
    across: dict[tuple, dict[str, float]] = {}  # a setting -> each call's median of it
    for r in rows:
        across.setdefault((r["fa_build"], r["arch"], r["layers"], r["run"], r["test"]), {})[r["file"]] = r["measured_s"]
    across = {k: v for k, v in across.items() if len(v) > 1}

    def timings(r):  # every timing of the row's setting: its rounds, and its medians in the other calls
        own = rounds.get((r["file"], r["arch"], r["layers"], r["run"], r["test"]), [r["measured_s"]])
        other = across.get((r["fa_build"], r["arch"], r["layers"], r["run"], r["test"]), {})
        return own + [t for f, t in other.items() if f != r["file"]]
    held = [r for r in rows if not r["calibration"]]
    table = {id(r): timings(r) for r in held}
    return {"within a call (rounds)": summary([floor_pct(v) for v in rounds.values()]),
            "across calls": summary([floor_pct(list(v.values())) for v in across.values()]),
            "held-out runs": misses(held, table, id, miss_pct)}


def peers(report: dict, miss_pct: float) -> dict:
    """The same for Accelerate and AirLLM (time per token), from peers_report.py's rows: a call's rounds are its
    rows of one (arch, layers, run, batch, prompt); across calls, each call's median of them."""
    out = {}
    for engine in ("accelerate", "airllm"):
        rows = [dict(r, pred=r["predicted_tpot_s"], test=f"b{r['batch']} p{r['prompt']}",
                     measured_s=r["measured_tpot_s"]) for r in report["rows"] if r["engine"] == engine]
        within: dict[tuple, list[float]] = {}
        across: dict[tuple, dict[str, list[float]]] = {}
        for r in rows:
            within.setdefault((r["file"], r["arch"], r["layers"], r["run"], r["test"]), []).append(r["measured_s"])
            across.setdefault((r["arch"], r["layers"], r["run"], r["test"]), {}).setdefault(
                r["file"], []).append(r["measured_s"])
        rounds = {k: v for k, v in within.items() if len(v) > 1}
        calls = {k: [statistics.median(v) for v in per.values()] for k, per in across.items() if len(per) > 1}
        table = {k: [t for per in v.values() for t in per] for k, v in across.items()}
        held = [r for r in rows if not r["calibration"]]
        out[engine] = {"within a call (rounds)": summary([floor_pct(v) for v in rounds.values()]),
                       "across calls (each call's median)": summary([floor_pct(v) for v in calls.values()]),
                       "held-out runs": misses(held, table, lambda r: (r["arch"], r["layers"], r["run"], r["test"]),
                                               miss_pct)}
    return out


def read_json(path: str, option: str, key: str = "rows",
              fix: str = "the file the report's --json option wrote") -> dict:
    """A JSON object holding `key` (a report's --json output: its rows), or one sentence naming the option, the file
    and the fix."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"repeat_floor: {option} {path!r} cannot be read as JSON ({exc.__class__.__name__}); "
                         f"give {fix}.") from None
    if not isinstance(doc, dict) or key not in doc:
        raise SystemExit(f"repeat_floor: {option} {path!r} holds no {key!r}; give {fix}.")
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llamacpp-report", help="lab/reports/llamacpp_report.py's --json output")
    ap.add_argument("--llamacpp-calls", nargs="*", default=[], help="the llama.cpp calls that report read")
    ap.add_argument("--peers-report", help="lab/reports/peers_report.py --per-call's --json output")
    ap.add_argument("--miss", type=float, default=25.0, help="a held-out run missed by more than this (%%)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if not (a.llamacpp_report or a.peers_report):
        raise SystemExit("repeat_floor: give --llamacpp-report or --peers-report (the reports' --json outputs).")
    out = {}
    if a.llamacpp_report:
        out["llamacpp"] = llamacpp(read_json(a.llamacpp_report, "--llamacpp-report"), a.llamacpp_calls, a.miss)
    if a.peers_report:
        out.update(peers(read_json(a.peers_report, "--peers-report"), a.miss))
    for engine, parts in out.items():
        for part, v in parts.items():
            runs = v.pop("runs", None)
            print(f"{engine}, {part}: {v}")
            for line in runs or ():
                print("   ", line)
            if runs is not None:
                v["runs"] = runs
    if a.json:
        tmp = Path(a.json).with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1))
        tmp.replace(a.json)  # atomic: an interrupted run leaves the previous file whole


if __name__ == "__main__":
    main()
