"""Start-up time of the CLI: each command below run N times in a fresh process, the median and max wall seconds.

Run: python benchmarks/bench_startup.py [--runs 10] [--root PATH]
The commands run as `offloadsim ...` (the console script on PATH, else `python -m offloadsim`) with the given
checkout (default: this one) first on PYTHONPATH, so two checkouts can be compared on the same interpreter.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (("--help",), ("hw", "list"), ("plan", "--help"))


def _launcher() -> list[str]:
    script = shutil.which("offloadsim")
    return [script] if script else [sys.executable, "-m", "offloadsim"]


def time_command(argv: tuple[str, ...], root: Path, runs: int) -> list[float]:
    """Wall seconds of `runs` fresh processes of `offloadsim argv`; raises if one exits non-zero."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    walls = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(_launcher() + list(argv), env=env, check=True, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t)
    return walls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="checkout whose offloadsim is timed (default: this one)")
    args = ap.parse_args()
    print(f"{'command':<26} {'median s':>9} {'max s':>7}   ({args.runs} runs each, {args.root})")
    for argv in COMMANDS:
        walls = time_command(argv, args.root, args.runs)
        print(f"{'offloadsim ' + ' '.join(argv):<26} {statistics.median(walls):9.3f} {max(walls):7.3f}")


if __name__ == "__main__":
    main()
