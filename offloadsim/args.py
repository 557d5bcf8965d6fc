"""Argument definitions for every subcommand (argparse)."""
from __future__ import annotations

import argparse

from offloadsim import handlers
from offloadsim.machine_flags import add_machine_flags
from offloadsim.outputs import add_force


def _model(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="preset name, config.json path or checkpoint folder")
    p.add_argument("--dtype", default=None, help="weight format: bf16, fp16, fp8, int8, q4_k_m or bits per weight")


def _machine(p: argparse.ArgumentParser, required: bool = False) -> None:
    add_machine_flags(p, required)


def add_all(sub: argparse._SubParsersAction) -> None:
    hw = sub.add_parser("hw", help="list presets and parts, show a machine with its sources, detect this machine")
    hw.add_argument("action", choices=["list", "parts", "show", "detect"])
    hw.add_argument("name", nargs="?", help="machine name for 'show' (or use the machine flags)")
    add_machine_flags(hw, default=None)
    hw.add_argument("--out", default=None, help="'detect': write the profile JSON here")
    hw.add_argument("--disk-path", default=".", help="'detect': folder whose disk is read (default .)")
    hw.add_argument("--json", action="store_true")
    add_force(hw)
    hw.set_defaults(run=handlers.hw)

    info = sub.add_parser("info", help="per-unit eq. (1) time in every tier and the eq. (2) verdict")
    _model(info)
    _machine(info)
    info.add_argument("--codec-ratio", type=float, default=0.70, help="stored/raw size of the codec (default 0.70)")
    info.add_argument("--unpack-speed", default=None, help="total unpack speed, e.g. 4GB/s (default: machine's CPU)")
    info.add_argument("--json", action="store_true")
    info.set_defaults(run=handlers.info)

    gap = sub.add_parser("gap", help="VRAM bandwidth over host-link bandwidth per GPU generation")
    gap.add_argument("--json", action="store_true")
    gap.set_defaults(run=handlers.gap)

    from offloadsim.args_sim import add_sim
    add_sim(sub, _model, _machine)
    from offloadsim.args_plan import add_plan, add_whatif
    add_plan(sub, _model, _machine)
    add_whatif(sub, _model, _machine)
    from offloadsim.args_validate import add_validate
    add_validate(sub)
