"""Handlers for the hardware subcommands: hw and gap (they need the presets only, not the simulator)."""
from __future__ import annotations

import argparse

from hwmodels.presets import get_machine, load_machine
from hwmodels.units import InputError
from offloadsim.hwreport import format_gap, gap_rows, machine_detail, machines_rows, parts_rows
from offloadsim.output import emit


def hw(args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = machines_rows()
        text = "\n".join(f"{r['name']:<16} {r['gpu']:<24} VRAM {r['vram_bytes'] / 1e9:6.1f} GB  {r['link']:<9} "
                         f"pinned {r['pinned_h2d_bytes_per_s'] / 1e9:5.1f} GB/s  RAM {r['ram_bytes'] / 1e9:6.0f} GB  "
                         f"{r['storage']}" for r in rows)
        return emit(args, rows, text + "\n(offloadsim hw show NAME prints every value with its source)")
    if args.action == "parts":
        parts = parts_rows()
        return emit(args, parts, "\n".join(f"{k:<12} {', '.join(v)}" for k, v in parts.items())
                    + "\n(compose a machine: --gpu NAME --ram SIZE --storage NAME|SPEED --link pcieGxL --cpu NAME)")
    if args.action == "detect":
        return hw_detect(args)
    if args.name and args.machine is not None and not hasattr(args.machine, "resolve"):
        raise InputError("name: give the machine either as NAME or as --machine, not both.")
    if args.machine is None and not args.name:
        raise InputError("name: 'hw show' needs a machine name or machine flags such as --gpu rtx4070; run "
                         "'offloadsim hw list' and 'offloadsim hw parts' to see them.")
    if hasattr(args.machine, "resolve") and args.name and args.machine.base is None:
        from dataclasses import replace
        args.machine = replace(args.machine, base=args.name)
    machine = get_machine(args.name) if args.machine is None else load_machine(args.machine)
    # "machine": the whole spec, so that this JSON loads back as --machine FILE
    d = {**machine_detail(args.name if args.machine is None else machine), "machine": machine.model_dump(mode="json")}
    text = f"{d['name']}: {d['description']}\n" + (f"  composed on base {d['base']}\n" if "base" in d else "") + \
        "\n".join(f"  {v['field']:<38} {v['value']!s:<24} {v['source']}" for v in d["values"])
    return emit(args, d, text)


def hw_detect(args: argparse.Namespace) -> int:
    """`hw detect`: this machine's parts measured where possible, the rest from presets, written as a profile."""
    from offloadsim.detect import detect_machine
    from offloadsim.machine_flags import compose, with_gpu_values
    from offloadsim.outputs import check_output
    from hwmodels.files import write_atomic

    out = check_output(args.out, "out", (), (".json",))
    request = args.machine if hasattr(args.machine, "resolve") else None
    base = request.base if request is not None else args.machine
    machine, notes = detect_machine(args.disk_path, base)
    if request is not None:  # the parts the user names replace what was detected
        machine = with_gpu_values(compose(machine, request.parts, request.ram, base_named=False), request.gpu_values)
        given = {**request.parts, **({"ram": request.ram} if request.ram else {}), **request.gpu_values}
        notes.append("given by flags, replacing what was detected: "
                     + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in given.items()))
    if base is not None:
        notes.append(f"values not measured come from {base} (--machine)")
    d = {**machine_detail(machine), "machine": machine.model_dump(mode="json")}
    if out is not None:
        write_atomic(out, machine.model_dump_json(indent=1))
    text = "\n".join(notes) + "\n" + "\n".join(f"  {v['field']:<38} {v['value']!s:<24} {v['source']}"
                                                 for v in d["values"])
    if out is not None:
        text += f"\nwrote {out} (use it as --machine {out})"
    return emit(args, {**d, "notes": notes, "out": str(out) if out else None}, text)


def gap(args: argparse.Namespace) -> int:
    rows = gap_rows()
    return emit(args, rows, format_gap(rows))
