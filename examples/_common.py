"""Shared bits of the examples: where figures go, and the one machine-readable line each prints last."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

OUT = Path(os.environ.get("OFFLOADSIM_EXAMPLES_OUT", Path(__file__).resolve().parent.parent / "docs" / "figures"))


def figure(name: str) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    return OUT / name


def result(**data) -> None:
    """The last line: RESULT {json}, so tests can compare the printed numbers with the API."""
    print("RESULT " + json.dumps(data, default=float))
    sys.stdout.flush()
