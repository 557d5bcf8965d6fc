"""The thin command-line front end: parse arguments, call the library, print tables or JSON.

Bad input prints one sentence naming the field, the value and the fix, and exits with code 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from pydantic import ValidationError

from hwmodels.units import InputError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str):
    def deco(fn):
        COMMANDS[name] = fn
        return fn
    return deco


def emit(args: argparse.Namespace, data: dict | list, text: str) -> int:
    print(json.dumps(data, indent=1, default=float) if getattr(args, "json", False) else text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from offloadsim import commands, commands_plan, commands_sim, commands_validate  # noqa: F401  (registers handlers)
    from offloadsim.args import add_all

    p = argparse.ArgumentParser(prog="offloadsim", description="Simulate, plan and validate weight streaming "
                                "(SSD -> RAM -> unpack -> PCIe -> VRAM) for models larger than GPU memory.")
    add_all(p.add_subparsers(dest="cmd", required=True, metavar="COMMAND"))
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.cmd](args)
    except InputError as exc:
        print(f"offloadsim: error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        print(f"offloadsim: error: {exc.title} field {field!r} = {err.get('input')!r}: {err['msg']}; fix that value.",
              file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
