"""Runs whose CPU weights fill between two shares of the host's last-level cache, priced with two values of
PeerSpec.cpu_cache_share (lab/journal/peers.md, twenty-ninth session): which speed, the L3's or memory's, each run kept.

Each input is a `llamacpp_report.py --json` output over the same files (its `rows`: the fitted costs, no per-call
scale), one made with the default share and one with another (the PeerSpec default edited); the band is given as
shares of cpu.llc_bytes. One line per one-sequence generation run not used to fit:

    cd docs/peers && PYTHONPATH=../.. python ../../benchmarks/llamacpp_llc_band.py A.json B.json llamacpp-*.json
"""
from __future__ import annotations

import argparse
import json

from lab.reports.llamacpp_report import HOST, cpu_bytes, load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first", help="llamacpp_report.py --json output, the default cpu_cache_share")
    ap.add_argument("second", help="the same with another cpu_cache_share")
    ap.add_argument("files", nargs="+", help="the llamacpp-*.json files both reports read")
    ap.add_argument("--band", default="0.6,1.0", help="LOW,HIGH shares of the last-level cache")
    a = ap.parse_args()
    low, high = (float(x) for x in a.band.split(","))
    nbytes = {}
    for e, shape, _machine, runs in load(a.files):
        for _kind, rec, run in runs:
            test = f"tg{rec['n_gen']}" if rec["n_gen"] > 0 else f"pp{rec['n_prompt']}"
            nbytes[(e["file"], e["arch"], shape.n_blocks, run.label, test, run.workload.batch)] = cpu_bytes(run, shape)
    rows = zip(json.load(open(a.first))["rows"], json.load(open(a.second))["rows"])
    out = []
    for x, y in rows:
        key = (x["file"], x["arch"], x["layers"], x["run"], x["test"], x["batch"])  # a call may cut one shape twice
        share = nbytes.get(key, 0) / HOST.cpu.llc_bytes
        if x["test"].startswith("tg") and x["batch"] == 1 and not x["calibration"] and low < share <= high:
            out.append((share, x["arch"], x["file"], x["run"], x["error_pct"], y["error_pct"], x["stddev_pct"]))
    for row in sorted(out):
        print("%.2f %-14s %-18s %-42s first %+6.1f%%  second %+6.1f%%  sd %.1f%%" % row)


if __name__ == "__main__":
    main()
