"""What every command prints: its result (a table or JSON) on stdout, bad input as one sentence on stderr."""
from __future__ import annotations

import argparse
import math
import sys

from hwmodels.files import json_text
from hwmodels.units import InputError


def emit(args: argparse.Namespace, data: dict | list, text: str) -> int:
    """Print the answer (text, or JSON with --json), once every number in it is checked: an infinite one is refused
    in one sentence naming it (an input beyond its physical range got through); NaN, a value that does not apply,
    is null in JSON."""
    bad = infinite_at(data)
    if bad:
        raise InputError(f"answer: {bad!r} came out infinite, so an input is beyond what a machine can do; check the "
                         "profile's and the plan's values (offloadsim hw show) and the counts given.")
    print(json_text(data) if getattr(args, "json", False) else text)
    return 0


def infinite_at(data, path: str = "") -> str | None:
    """The path of the first infinite number in `data`, else None."""
    if isinstance(data, dict):
        return next((p for k, v in data.items() if (p := infinite_at(v, f"{path}.{k}" if path else str(k)))), None)
    if isinstance(data, (list, tuple)):
        return next((p for i, v in enumerate(data) if (p := infinite_at(v, f"{path}[{i}]"))), None)
    if isinstance(data, (int, float)) and not isinstance(data, bool) and math.isinf(data):
        return path or "value"
    return None


def fail(sentence: str) -> int:
    """Print one sentence on stderr (newlines folded) and return exit code 2."""
    print("offloadsim: error: " + " ".join(str(sentence).split()), file=sys.stderr)
    return 2
