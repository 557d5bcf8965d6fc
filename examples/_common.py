"""Shared bits of the examples: where figures go, and the one machine-readable line each prints last.

Figures go to the folder given as `--out DIR`, else $OFFLOADSIM_EXAMPLES_OUT, else `./figures` under the current
folder; never into the repository unless asked (`python examples/pcie_wall.py --out docs/figures` refreshes the
README gallery).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def _out_dir(argv: list[str]) -> Path:
    if "--out" in argv:
        i = argv.index("--out")
        if i + 1 >= len(argv):
            sys.exit("error: --out needs a folder, e.g. --out figures")
        folder = Path(argv[i + 1])
        if not folder.is_dir():
            sys.exit(f"error: --out {str(folder)!r} is not an existing folder; create it first.")
        return folder
    if os.environ.get("OFFLOADSIM_EXAMPLES_OUT"):
        return Path(os.environ["OFFLOADSIM_EXAMPLES_OUT"])
    return Path.cwd() / "figures"


OUT = _out_dir(sys.argv[1:])


def figure(name: str) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    return OUT / name


def result(**data) -> None:
    """The last line: RESULT {json}, so tests can compare the printed numbers with the API."""
    print("RESULT " + json.dumps(data, default=float))
    sys.stdout.flush()
