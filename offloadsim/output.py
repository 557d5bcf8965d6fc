"""What every command prints: its result (a table or JSON) on stdout, bad input as one sentence on stderr."""
from __future__ import annotations

import argparse
import json
import sys


def emit(args: argparse.Namespace, data: dict | list, text: str) -> int:
    print(json.dumps(data, indent=1, default=float) if getattr(args, "json", False) else text)
    return 0


def fail(sentence: str) -> int:
    """Print one sentence on stderr (newlines folded) and return exit code 2."""
    print("offloadsim: error: " + " ".join(str(sentence).split()), file=sys.stderr)
    return 2
