"""The one rule every number read from a file meets: finite, and within the physical range of its unit.

A field's unit is in its name (house style: `_bytes_per_s`, `_s`, `_ns`, `nbytes`, ...), so one table of ranges by
name suffix covers machine profiles (every part, the engines' costs, the compute grids), plan files and llama-bench
records alike. A value outside its range is a broken measurement or a typo: accepted, it would give a prediction of
1e305 s per token, or a walk over a timeline that never ends, with exit code 0.
"""
from __future__ import annotations

import math

from hwmodels.units import InputError

# (low, high) by the field name's suffix; the longest matching suffix wins
PHYSICAL_RANGES = {
    "_bytes_per_s": (1e6, 1e15), "_bytes_per_s_per_thread": (1e6, 1e15), "flops_per_s": (1e8, 1e19),
    "capacity_bytes": (2**28, 2**50), "vram_bytes": (2**28, 2**50), "_bytes": (0, 2**60), "nbytes": (0, 2**60),
    "_s": (0.0, 1.0), "startup_s": (0.0, 600.0), "prefill_s": (0.0, 3600.0), "decode_s": (0.0, 3600.0),
    "_ns": (1e3, 1e15), "year": (1990, 2100), "generation": (1, 7), "lanes": (1, 32), "cores": (1, 4096),
    "threads": (1, 4096), "queue_depth": (1, 65536), "copy_contention": (0.01, 100.0), "_scale": (1e-3, 1e3),
    "_share": (0.0, 1.0), "batch": (1, 2**20), "prefill_tokens": (1, 2**24), "decode_context": (1, 2**24)}
MAX_MAGNITUDE = 2.0**63  # any other number: a count or an id, never beyond a 64-bit integer


def range_of(field: str) -> tuple[float, float] | None:
    """The physical (low, high) of a field by its name's unit suffix; None for a field without a unit."""
    suffix = max((k for k in PHYSICAL_RANGES if field.endswith(k)), key=len, default=None)
    if suffix is None or suffix == "_s" and field.endswith("_per_s"):
        return None
    return PHYSICAL_RANGES[suffix]


def out_of_range(field: str, value) -> tuple[float, float] | None:
    """The (low, high) a field's value (a number, or a list or mapping of numbers) lies outside, else None."""
    bounds = range_of(field)
    if bounds is None:
        return None
    low, high = bounds
    if any(not low <= v <= high for v in _numbers(value)):
        return bounds
    return None


def _numbers(value):
    """The numbers in a value (a number, or nested lists and mappings of them); booleans are not numbers."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield v


def _unit_field(key: str, parent: str) -> str:
    """The field whose unit a mapping's entry has: its own, or its parent's for a table keyed by names
    (unpack_bytes_per_s_per_thread: {'zstd': ...}, stream_overhead_s: {'ram_pinned': ...})."""
    return key if range_of(key) is not None or range_of(parent) is None else parent


def bad_number(data, path: str = "") -> tuple[str, object, str] | None:
    """(field path, value, what is wrong) of the first number in `data` (parsed JSON) that is not finite, beyond any
    64-bit count, or outside its unit's physical range (PHYSICAL_RANGES); None when all pass. Iterative: no
    recursion on hostile nesting."""
    stack = [(path, "", data)]
    while stack:
        where, field, v = stack.pop()
        if isinstance(v, dict):  # pushed in reverse: the first bad number in the file's order is named
            stack.extend(reversed([(f"{where}.{k}" if where else str(k), _unit_field(str(k), field), x)
                                   for k, x in v.items()]))
        elif isinstance(v, (list, tuple)):
            stack.extend(reversed([(f"{where}[{i}]", field, x) for i, x in enumerate(v)]))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            if not math.isfinite(v):
                return where, v, "is not a finite number"
            bounds = out_of_range(field, v)
            if bounds:
                return where, v, f"is outside {bounds[0]:g}..{bounds[1]:g}"
            if abs(v) > MAX_MAGNITUDE:
                return where, v, "is beyond any real count (2**63)"
    return None


def nonfinite_at(data) -> str | None:
    """The path of the first NaN or infinite number in `data` (parsed JSON), else None."""
    stack = [("", data)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, dict):
            stack.extend(reversed([(f"{where}.{k}" if where else str(k), x) for k, x in v.items()]))
        elif isinstance(v, list):
            stack.extend(reversed([(f"{where}[{i}]", x) for i, x in enumerate(v)]))
        elif isinstance(v, float) and not math.isfinite(v):
            return where or "value"
    return None


def check_numbers(data, what: str, fix: str) -> None:
    """Raise InputError naming the field path and value of the first number `bad_number` finds in `data`."""
    bad = bad_number(data)
    if bad:
        where, value, why = bad
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise InputError(f"{what} field {where!r} = {shown} {why}; {fix}.")
