"""Handler of calibrate-peer: a peer engine's costs fitted to this host from the engine's own benchmark output."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from hwmodels.presets import load_machine
from hwmodels.units import InputError
from offloadsim.output import emit
from hwmodels.files import json_text
from offloadsim.outputs import atomic, check_output
from sim.engines import installed_names

ENGINE = "llamacpp"  # the one engine whose benchmark output calibrate-peer reads (llama-bench's)


def calibrate_peer_cmd(args: argparse.Namespace) -> int:
    if ENGINE not in installed_names():
        raise InputError(f"calibrate-peer: the llama.cpp engine is not installed (no sim/engines/{ENGINE}; installed: "
                         f"{', '.join(installed_names())}); calibrate-peer fits llama.cpp's costs only, so install "
                         "that engine to use it.")
    from sim.model.resolve import load_model
    from sim.engines.llamacpp.bench import calibrate_host
    from sim.engines.llamacpp.bench_records import read_records
    out = check_output(args.out, "out", (args.bench, args.model, args.profile), (".json",), args.force)
    machine = load_machine(args.profile)
    shape = load_model(args.model)
    records = read_records(Path(args.bench))
    m, rep = calibrate_host(shape, machine, records, f"{args.bench} on {args.profile}")
    prof = {"machine": json.loads(m.model_dump_json()), "calibrate_peer": rep}
    with atomic(out) as tmp:
        tmp.write_text(json_text(prof))
    lines = [f"llama.cpp on this host: its CPU share runs {rep['host_cpu_scale']:.3f}x as fast as the llama.cpp costs "
             f"of profile {args.profile!r} say; profile written to {args.out} (use it as --machine {args.out})",
             "| run | tokens | measured (s/token) | predicted before | after | used |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['run']} | {r['tokens']} | {r['measured_s']:.4f} | {r['before_s']:.4f} "
              f"({100 * (r['before_s'] / r['measured_s'] - 1):+.1f}%) | {r['after_s']:.4f} "
              f"({100 * (r['after_s'] / r['measured_s'] - 1):+.1f}%) | {'yes' if r['used'] else 'no: all on the GPU'} |"
              for r in rep["runs"]]
    again = rep["repeats"]
    lines.append(f"{again['settings']} setting(s) timed more than once moved by up to {again['worst_floor_pct']:.1f}% "
                 "between runs: no prediction can come closer to all their timings than that" if again["settings"]
                 else "no setting was timed twice: run llama-bench again minutes later and give both outputs to see "
                      "how far this host moves the same run (one run in a slow spell scales every prediction)")
    return emit(args, {"profile": str(out), **rep}, "\n".join(lines))
