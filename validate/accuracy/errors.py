"""Error statistics of predictions against measurements, and the floor a host's own repeats set under them."""
from __future__ import annotations

import math
from dataclasses import dataclass


def error_pct(predicted: float, measured: float) -> float:
    """Signed error of a prediction, in percent of the measurement: 100 * (predicted / measured - 1); NaN where
    nothing was measured (0 or NaN)."""
    if not measured or math.isnan(measured):
        return float("nan")
    return 100 * (predicted / measured - 1)


def percentile(xs: list[float], q: float) -> float:
    """The q-th percentile (0-100) of xs, linear between the closest ranks (numpy's default): rank (n - 1) q / 100."""
    if not xs:
        raise ValueError("percentile of no values")
    s = sorted(xs)
    rank = (len(s) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


@dataclass(frozen=True)
class ErrorStats:
    """Absolute errors (%) of a group of runs: how many, median, 90th percentile, worst."""
    runs: int
    median_pct: float
    p90_pct: float
    worst_pct: float


def abs_stats(errors_pct: list[float]) -> ErrorStats | None:
    """ErrorStats of the absolute values of signed errors (NaN ones left out); None when none is left."""
    xs = [abs(e) for e in errors_pct if not math.isnan(e)]
    if not xs:
        return None
    return ErrorStats(len(xs), percentile(xs, 50), percentile(xs, 90), max(xs))


def floor_pct(times: list[float]) -> float:
    """How far one setting timed several times moved, as the least worst |error| any single prediction of them can
    reach (%): halfway in ratio between the fastest and the slowest, 100 (max - min) / (max + min)."""
    return 100 * (max(times) - min(times)) / (max(times) + min(times))


@dataclass(frozen=True)
class RepeatFloor:
    """The floors of the settings timed more than once: how many settings, their median and worst floor (%)."""
    settings: int
    median_pct: float
    worst_pct: float


def repeat_floor(groups: dict[tuple, list[float]]) -> RepeatFloor | None:
    """RepeatFloor over the settings (key -> every timing of it) timed at least twice; None when none was."""
    floors = [floor_pct(ts) for ts in groups.values() if len(ts) > 1]
    if not floors:
        return None
    return RepeatFloor(len(floors), percentile(floors, 50), max(floors))
