"""Parse human strings ("4GiB", "2.3GB/s", "pcie4x16", "25us") into SI numbers, at the edges only.

GB = 1e9 bytes, GiB = 2**30 bytes (humanfriendly's rules); never mixed inside.
Raises InputError with one sentence naming the field, the value and the fix.
"""
from __future__ import annotations

import difflib
import re

import humanfriendly


class InputError(ValueError):
    """Bad user input: the message is one sentence naming the field, the value and the fix."""


def parse_bytes(text: str | int | float, field: str = "size") -> int:
    """'4GiB' -> 4294967296, '24GB' -> 24000000000; plain numbers are bytes."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        try:
            value = float(humanfriendly.parse_size(str(text).strip()))
        except (humanfriendly.InvalidSize, ValueError):
            raise InputError(f"{field}: cannot read {text!r} as a size; write it like '4GiB', '24GB' or '512MiB'.") from None
    if value < 0:
        raise InputError(f"{field}: {text!r} is negative; give a size of zero or more, like '4GiB'.")
    return int(round(value))


def parse_bandwidth(text: str | int | float, field: str = "bandwidth") -> float:
    """'2.3GB/s' -> 2.3e9 bytes per second; must be positive."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        raw = str(text).strip()
        body = re.sub(r"(?i)\s*(/s|ps)$", "", raw)
        try:
            value = float(humanfriendly.parse_size(body))
        except (humanfriendly.InvalidSize, ValueError):
            raise InputError(f"{field}: cannot read {text!r} as a bandwidth; write it like '2.3GB/s' or '900MB/s'.") from None
    if not value > 0:
        raise InputError(f"{field}: {text!r} must be positive; give a bandwidth like '2.3GB/s'.")
    return value


_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_seconds(text: str | int | float, field: str = "time") -> float:
    """'25us' -> 2.5e-05; plain numbers are seconds."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(s|ms|us|µs|ns)?\s*", str(text))
        if not m:
            raise InputError(f"{field}: cannot read {text!r} as a time; write it like '25us', '1.5ms' or '0.2s'.")
        value = float(m.group(1)) * _TIME_UNITS[m.group(2) or "s"]
    if value < 0:
        raise InputError(f"{field}: {text!r} is negative; give a time of zero or more.")
    return value


def parse_link(text: str, field: str = "link") -> tuple[int, int]:
    """'pcie4x16' -> (4, 16); 'pcie5' -> (5, 16)."""
    m = re.fullmatch(r"\s*pcie\s*([3-6])(?:\.0)?\s*(?:x\s*(1|2|4|8|16))?\s*", str(text).lower())
    if not m:
        raise InputError(f"{field}: cannot read {text!r} as a PCIe link; write it like 'pcie4x16' or 'pcie5'.")
    return int(m.group(1)), int(m.group(2) or 16)


def unknown_name(field: str, value: str, known: list[str]) -> InputError:
    """An InputError for an unknown preset name that suggests the closest names."""
    close = difflib.get_close_matches(value, known, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else f"choose one of {', '.join(sorted(known))}."
    return InputError(f"{field}: unknown name {value!r}; {hint}")
