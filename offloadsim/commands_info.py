"""Handler of `info`: per-unit eq. (1) time in every tier and the eq. (2) verdict."""
from __future__ import annotations

import argparse

from hwmodels.presets import load_machine
from offloadsim.inforeport import format_info, info
from offloadsim.output import emit
from offloadsim.resolve import resolve_codec, resolve_model


def info_cmd(args: argparse.Namespace) -> int:
    machine = load_machine(args.machine)
    model = resolve_model(args)
    rep = info(model, machine, resolve_codec(args, machine))
    return emit(args, rep, format_info(rep))
