"""The arguments every command shares, resolved once: the model, the codec, the workload and the budgets."""
from __future__ import annotations

import argparse

from hwmodels.units import InputError, parse_bandwidth
from offloadsim import limits
from sim.costs.equations import Codec, machine_codec
from sim.model.formats import parse_format
from sim.model.resolve import load_model
from sim.plan import Budgets, Workload


def resolve_model(args: argparse.Namespace):
    return load_model(args.model, parse_format(args.dtype) if args.dtype is not None else None)


def resolve_codec(args: argparse.Namespace, machine) -> Codec:
    if not 0 < args.codec_ratio <= 1:
        raise InputError(f"codec-ratio: {args.codec_ratio} is out of range; give stored/raw size in (0, 1], like 0.7.")
    if args.unpack_speed is not None:
        return Codec(name="custom", ratio=args.codec_ratio, unpack_bytes_per_s=parse_bandwidth(args.unpack_speed, "unpack-speed"))
    return machine_codec(machine, ratio=args.codec_ratio)


def resolve_workload(args: argparse.Namespace) -> Workload:
    """The request's counts, each within its sane maximum (offloadsim.limits)."""
    return limits.workload(args, warm=args.warm)


def resolve_budgets(args: argparse.Namespace, machine) -> Budgets:
    """--vram/--ram/--pinned, refused above the machine's hardware."""
    return limits.budgets(args, machine)
