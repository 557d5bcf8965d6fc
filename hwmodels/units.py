"""Parse human strings ("4GiB", "2.3GB/s", "10Gbps", "pcie4x16", "25us") into SI numbers, at the edges only.

GB = 1e9 bytes, GiB = 2**30 bytes, never mixed inside. In a bandwidth a lower-case `b` before `/s` or `ps` is bits
("10Gbps" = 1.25e9 bytes/s); `B` is bytes. Every parser refuses NaN, infinities and absurd magnitudes.
Raises InputError with one sentence naming the field, the value and the fix.
"""
from __future__ import annotations

import difflib
import math
import re

GB = 10**9
GiB = 2**30


class InputError(ValueError):
    """Bad user input: the message is one sentence naming the field, the value and the fix."""


MAX_BYTES = 2**60                 # 1 EiB: no machine or model of this field comes near it
MAX_BYTES_PER_S = 1e15            # 1 PB/s
MAX_SECONDS = 1e9
_NUM = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"
_PREFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15, "e": 1e18}
_SIZE = re.compile(rf"\s*{_NUM}\s*(?:([kKmMgGtTpPeE])(i)?)?\s*(B|b|bytes?|bits?)?\s*")


def _finite(value: float, text, field: str, what: str, example: str) -> float:
    if not math.isfinite(value):
        raise InputError(f"{field}: {text!r} is not a finite {what}; give a number like {example!r}.")
    return value


def _magnitude(text, field: str, what: str, example: str, shown=None) -> tuple[float, bool]:
    """(value, is_bits) of '4GiB', '10Gb', '512 MB' or a plain number; messages quote `shown` (default `text`)."""
    shown = text if shown is None else shown
    if isinstance(text, bool):
        raise InputError(f"{field}: {shown!r} is not a {what}; write it like {example!r}.")
    if isinstance(text, (int, float)):
        return _finite(float(text), shown, field, what, example), False
    raw = str(text).strip()
    if raw.startswith("-"):
        raise InputError(f"{field}: {shown!r} is negative; give a {what} of zero or more, like {example!r}.")
    m = _SIZE.fullmatch(raw)
    if not m:
        raise InputError(f"{field}: cannot read {shown!r} as a {what}; write it like {example!r}.")
    num, prefix, binary, unit = m.groups()
    if binary and not prefix:
        raise InputError(f"{field}: cannot read {shown!r} as a {what}; write it like {example!r}.")
    scale = 1024 ** " kmgtpe".index(prefix.lower()) if binary else _PREFIX[(prefix or "").lower()]
    value = _finite(float(num) * scale, shown, field, what, example)
    if re.search(r"[1-9]", num.lower().split("e")[0]) and value < 1:
        raise InputError(f"{field}: {shown!r} is less than one byte; give zero or a real {what}, like {example!r}.")
    return value, bool(unit) and (unit == "b" or unit.startswith("bit"))


def parse_bytes(text: str | int | float, field: str = "size") -> int:
    """'4GiB' -> 4294967296, '24GB' -> 24000000000; plain numbers are bytes; '8Gbit' is 1e9 bytes."""
    value, bits = _magnitude(text, field, "size", "4GiB")
    if bits and re.search(r"bits?$", str(text).strip()):
        value /= 8
    if value < 0:
        raise InputError(f"{field}: {text!r} is negative; give a size of zero or more, like '4GiB'.")
    if value > MAX_BYTES:
        raise InputError(f"{field}: {text!r} is larger than 1 EiB; give a real size, like '4GiB'.")
    return int(round(value))


def parse_bandwidth(text: str | int | float, field: str = "bandwidth") -> float:
    """'2.3GB/s' -> 2.3e9 bytes per second, '10Gbps' -> 1.25e9; must be positive."""
    if isinstance(text, str):
        if text.strip().startswith("-"):
            raise InputError(f"{field}: {text!r} must be positive; give a bandwidth like '2.3GB/s'.")
        body = re.sub(r"(?i)\s*(/s|ps)$", "", text.strip())
        value, bits = _magnitude(body, field, "bandwidth", "2.3GB/s", shown=text)
        value = value / 8 if bits else value
    else:
        value, _ = _magnitude(text, field, "bandwidth", "2.3GB/s")
    if not value > 0:
        raise InputError(f"{field}: {text!r} must be positive; give a bandwidth like '2.3GB/s'.")
    if value > MAX_BYTES_PER_S:
        raise InputError(f"{field}: {text!r} is above 1 PB/s; give a real bandwidth, like '2.3GB/s'.")
    return value


_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_seconds(text: str | int | float, field: str = "time") -> float:
    """'25us' -> 2.5e-05; plain numbers are seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = _finite(float(text), text, field, "time", "25us")
    else:
        m = re.fullmatch(rf"\s*(-?){_NUM}\s*(s|ms|us|µs|ns)?\s*", str(text))
        if not m:
            raise InputError(f"{field}: cannot read {text!r} as a time; write it like '25us', '1.5ms' or '0.2s'.")
        value = _finite(float(m.group(2)) * _TIME_UNITS[m.group(3) or "s"], text, field, "time", "25us")
        value = -value if m.group(1) else value
    if value < 0:
        raise InputError(f"{field}: {text!r} is negative; give a time of zero or more.")
    if value > MAX_SECONDS:
        raise InputError(f"{field}: {text!r} is longer than 1e9 s; give a real time, like '25us'.")
    return value


def parse_link(text: str, field: str = "link") -> tuple[int, int]:
    """'pcie4x16' -> (4, 16); 'pcie5' -> (5, 16)."""
    m = re.fullmatch(r"\s*pcie\s*([3-6])(?:\.0)?\s*(?:x\s*(1|2|4|8|16))?\s*", str(text).lower())
    if not m:
        raise InputError(f"{field}: cannot read {text!r} as a PCIe link; write it like 'pcie4x16' or 'pcie5'.")
    return int(m.group(1)), int(m.group(2) or 16)


def check_count(value, field: str, low: int, high: int, why: str = "") -> int:
    """An integer in [low, high], else InputError naming the field, the value and the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{field}: {value!r} is not a whole number; give one from {low} to {high}.")
    if not low <= value <= high:
        what = f"must be at least {low}" if value < low else f"is more than {high}"
        raise InputError(f"{field}: {value!r} {what}; give a whole number from {low} to {high}"
                         + (f" ({why})." if why else "."))
    return value


def check_real(value, field: str, low: float, high: float) -> float:
    """A finite real number in [low, high], else InputError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise InputError(f"{field}: {value!r} is out of range; give a number from {low:g} to {high:g}.")
    return float(value)


def unknown_name(field: str, value: str, known: list[str]) -> InputError:
    """An InputError for an unknown preset name that suggests the closest names."""
    close = difflib.get_close_matches(str(value), known, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else f"choose one of {', '.join(sorted(known))}."
    return InputError(f"{field}: unknown name {str(value)[:80]!r}; {hint}")


# the memory sizes a machine or a budget may have: from 64 KiB (the tiny random checkpoints of the tests need a few
# hundred KB; less holds no layer of any model) to 1 PiB (above any machine built)
MIN_MEMORY_BYTES, MAX_MEMORY_BYTES = 2**16, 2**50


def check_size(nbytes: int, field: str, text=None) -> int:
    """A memory size or budget within [MIN_MEMORY_BYTES, MAX_MEMORY_BYTES], else InputError naming the field, the
    value and the fix (every command's --vram, --ram, --ram-budget, --pinned, --gpu-vram)."""
    if not MIN_MEMORY_BYTES <= nbytes <= MAX_MEMORY_BYTES:
        shown = text if text is not None else nbytes
        side = "less than 64 KiB" if nbytes < MIN_MEMORY_BYTES else "more than 1 PiB"
        raise InputError(f"{field}: {shown!r} is {side}; give a size or budget from 64KiB to 1PiB, such as 16GiB.")
    return nbytes
