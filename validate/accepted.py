"""Which of a calibration's measured values a profile accepts.

A value outside the profile's plausible range (hwmodels.presets.PROFILE_RANGES) is a measurement the host's load
spoiled (a compute rate read a thousand times low while other work held the cores), never a property of the
machine: it is left out, so the profile keeps the base preset's value, and a note says which and why.
"""
from __future__ import annotations

from hwmodels.presets import RANGED_PARTS, profile_range


def fastest_rate(work: float, rounds_s: list[float]) -> float:
    """Work per second of the fastest round (load on the host only ever adds time to a round)."""
    if not rounds_s:
        raise ValueError("fastest_rate needs at least one round")
    return work / min(rounds_s)


def accepted_overrides(over: dict) -> tuple[dict, list[str]]:
    """(the overrides inside their ranges, one note per value left out). Keys are field paths ('gpu.vram_bytes');
    only the hardware parts have ranges (others, e.g. an engine's costs, pass as they are)."""
    kept, notes = {}, []
    for path, value in over.items():
        part, _, field = path.partition(".")
        bounds = profile_range(field, value) if part in RANGED_PARTS else None
        if bounds is None:
            kept[path] = value
            continue
        notes.append(f"{path}: measured {value!r}, outside {bounds[0]:g}..{bounds[1]:g}: too noisy to measure on "
                     f"this host (was it busy?); the base preset's value stays")
    return kept, notes
