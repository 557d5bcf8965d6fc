"""Published speeds of the peer engines on machines other than the H200 test machine, predicted through the command
line a user runs (`offloadsim simulate MODEL ... --policy ENGINE --json`) with the costs each machine gets
(sim/engines/<engine>/derived.py: its own fitted table, else derived from its parts and the H200's).

    python benchmarks/published_peers.py                       # every figure of lab/data/reference/published-peers.json
    python benchmarks/published_peers.py --only ktransformers-r1-decode --json /tmp/peers.json

Prints each figure's published and predicted value and the error (predicted / published - 1), then the median and
the worst absolute error.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "lab/data/reference/published-peers.json"


def simulate(model: str, args: list[str], engine: str) -> dict:
    """The command's JSON output; SystemExit naming the command when it fails."""
    from offloadsim.cli import main

    argv = ["simulate", model, *args, "--policy", engine, "--attribution", "0", "--json"]
    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        rc = main(argv)
    if rc != 0:
        raise SystemExit(f"offloadsim {' '.join(argv)} failed ({rc}): {err.getvalue().strip()}")
    return json.loads(buf.getvalue())


def predicted(metric: str, out: dict, args: list[str]) -> float:
    """The figure's metric from the simulate output."""
    def arg(name: str) -> int:
        return int(args[args.index(name) + 1])
    if metric == "decode_tokens_per_s":
        return 1.0 / out["time_per_token_s"]
    if metric == "prefill_tokens_per_s":
        return arg("--prompt-tokens") / out["ttft_s"]
    if metric == "s_per_token":
        return out["total_s"] / arg("--new-tokens")
    raise SystemExit(f"metric: {metric!r} is not one of decode_tokens_per_s, prefill_tokens_per_s, s_per_token")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--only", action="append", help="a figure's id (repeatable)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    a = ap.parse_args(argv)
    figures = [f for f in json.loads(a.data.read_text())["figures"] if not a.only or f["id"] in a.only]
    runs: dict[tuple, dict] = {}
    rows = []
    print(f"{'figure':36} {'engine':9} {'metric':21} {'published':>10} {'predicted':>10} {'error':>8}")
    for f in figures:
        key = (f["model"], tuple(f["args"]), f["engine"])
        if key not in runs:
            runs[key] = simulate(f["model"], f["args"], f["engine"])
        value = predicted(f["metric"], runs[key], f["args"])
        err = value / f["published"] - 1
        rows.append({"id": f["id"], "engine": f["engine"], "metric": f["metric"], "published": f["published"],
                     "predicted": value, "error": err,
                     "command": " ".join(["offloadsim", "simulate", f["model"], *f["args"], "--policy", f["engine"]])})
        print(f"{f['id']:36} {f['engine']:9} {f['metric']:21} {f['published']:10.3g} {value:10.3g} {err:+8.1%}",
              flush=True)
    errs = [abs(r["error"]) for r in rows]
    if errs:
        worst = max(rows, key=lambda r: abs(r["error"]))
        print(f"{len(rows)} figures: median |error| {statistics.median(errs):.1%}, worst {abs(worst['error']):.1%} "
              f"({worst['id']})")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
