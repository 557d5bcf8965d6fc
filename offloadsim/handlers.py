"""Each subcommand's handler, importing its command module only when it runs.

Parsing arguments (and `--help`) then loads argparse and the hardware presets, not the simulator, the planner,
scipy, numba, SimPy or matplotlib: a handler here is what `set_defaults(run=...)` names in the argument modules.
"""
from __future__ import annotations

import argparse


def hw(args: argparse.Namespace) -> int:
    from offloadsim.commands import hw as run
    return run(args)


def gap(args: argparse.Namespace) -> int:
    from offloadsim.commands import gap as run
    return run(args)


def info(args: argparse.Namespace) -> int:
    from offloadsim.commands_info import info_cmd
    return info_cmd(args)


def simulate(args: argparse.Namespace) -> int:
    from offloadsim.commands_sim import simulate_cmd
    return simulate_cmd(args)


def plan(args: argparse.Namespace) -> int:
    from offloadsim.commands_plan import plan_cmd
    return plan_cmd(args)


def pareto(args: argparse.Namespace) -> int:
    from offloadsim.commands_plan import pareto_cmd
    return pareto_cmd(args)


def whatif(args: argparse.Namespace) -> int:
    from offloadsim.commands_whatif import whatif_cmd
    return whatif_cmd(args)


def make_checkpoint(args: argparse.Namespace) -> int:
    from offloadsim.commands_validate import make_checkpoint_cmd
    return make_checkpoint_cmd(args)


def calibrate(args: argparse.Namespace) -> int:
    from offloadsim.commands_validate import calibrate_cmd
    return calibrate_cmd(args)


def validate(args: argparse.Namespace) -> int:
    from offloadsim.commands_validate import validate_cmd
    return validate_cmd(args)


def calibrate_peer(args: argparse.Namespace) -> int:
    from offloadsim.commands_peer import calibrate_peer_cmd
    return calibrate_peer_cmd(args)


def run(args: argparse.Namespace) -> int:
    from offloadsim.commands_run import run_cmd
    return run_cmd(args)
