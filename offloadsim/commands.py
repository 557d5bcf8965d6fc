"""Handlers for the foundation subcommands: hw, info, gap."""
from __future__ import annotations

import argparse

from hwmodels import get_machine
from hwmodels.presets import load_machine
from hwmodels.units import InputError, parse_bandwidth
from offloadsim.cli import command, emit
from offloadsim.hwreport import format_gap, gap_rows, machine_detail, machines_rows
from offloadsim.inforeport import format_info, info
from sim.equations import Codec, machine_codec
from sim.formats import parse_format
from sim.models import load_model


def resolve_model(args: argparse.Namespace):
    return load_model(args.model, parse_format(args.dtype) if args.dtype is not None else None)


def resolve_codec(args: argparse.Namespace, machine) -> Codec:
    if not 0 < args.codec_ratio <= 1:
        raise InputError(f"codec-ratio: {args.codec_ratio} is out of range; give stored/raw size in (0, 1], like 0.7.")
    if args.unpack_speed is not None:
        return Codec(name="custom", ratio=args.codec_ratio, unpack_bytes_per_s=parse_bandwidth(args.unpack_speed, "unpack-speed"))
    return machine_codec(machine, ratio=args.codec_ratio)


@command("hw")
def hw(args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = machines_rows()
        text = "\n".join(f"{r['name']:<16} {r['gpu']:<24} VRAM {r['vram_bytes'] / 1e9:6.1f} GB  {r['link']:<9} "
                         f"pinned {r['pinned_h2d_bytes_per_s'] / 1e9:5.1f} GB/s  RAM {r['ram_bytes'] / 1e9:6.0f} GB  "
                         f"{r['storage']}" for r in rows)
        return emit(args, rows, text + "\n(offloadsim hw show NAME prints every value with its source)")
    if not args.name:
        raise InputError("name: 'hw show' needs a machine name; run 'offloadsim hw list' to see them.")
    get_machine(args.name)
    d = machine_detail(args.name)
    text = f"{d['name']}: {d['description']}\n" + "\n".join(
        f"  {v['field']:<38} {v['value']!s:<24} {v['source']}" for v in d["values"])
    return emit(args, d, text)


@command("info")
def info_cmd(args: argparse.Namespace) -> int:
    machine = load_machine(args.machine)
    model = resolve_model(args)
    rep = info(model, machine, resolve_codec(args, machine))
    return emit(args, rep, format_info(rep))


@command("gap")
def gap(args: argparse.Namespace) -> int:
    rows = gap_rows()
    return emit(args, rows, format_gap(rows) + "\nratio = VRAM bandwidth / host-to-GPU bandwidth (x16, per direction)")
