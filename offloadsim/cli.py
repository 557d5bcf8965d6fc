"""The thin command-line front end: parse arguments, call the library, print tables or JSON.

Bad input prints one sentence naming the field, the value and the fix, and exits with code 2 (for every command,
argparse's own errors included). Set OFFLOADSIM_DEBUG=1 to see tracebacks of unexpected errors.
"""
from __future__ import annotations

import argparse
import os
import sys

from pydantic import ValidationError

from hwmodels.units import InputError
from offloadsim.output import fail

class _Parser(argparse.ArgumentParser):
    """argparse with one-sentence errors (no usage block) and exit code 2."""

    def error(self, message: str):
        fail(f"{message}; run '{self.prog} --help' for the arguments.")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from offloadsim.args import add_all  # each subcommand's parser carries its handler (set_defaults(run=...))

    p = _Parser(prog="offloadsim", description="Simulate, plan and validate weight streaming "
                "(SSD -> RAM -> unpack -> PCIe -> VRAM) for models larger than GPU memory.")
    add_all(p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=_Parser))
    return p


def _validation_sentence(exc: ValidationError) -> str:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or exc.title
    value = repr(err.get("input"))
    value = value if len(value) <= 80 else value[:77] + "..."
    return f"{exc.title} field {field!r} = {value}: {err['msg']}; fix that value."


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help exits 0, argument errors 2 (already printed in one sentence)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    try:
        return args.run(args)
    except InputError as exc:
        return fail(str(exc))
    except ValidationError as exc:
        return fail(_validation_sentence(exc))
    except RecursionError:
        return fail("input: a file nests too deeply to read; give a plain JSON file.")
    except MemoryError:
        return fail("input: the request needs more memory than this machine has; lower the counts or sizes.")
    except BrokenPipeError:
        return 0
    except OSError as exc:
        return fail(f"{exc.filename or 'file'}: {exc.strerror or exc}; check the path and its permissions.")
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not bad input: one line, exit 1 (OFFLOADSIM_DEBUG=1 shows the traceback)
        if os.environ.get("OFFLOADSIM_DEBUG"):
            raise
        print(f"offloadsim: internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}; please report "
              "it with the command line (OFFLOADSIM_DEBUG=1 shows the traceback).", file=sys.stderr)
        return 1
