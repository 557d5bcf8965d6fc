"""Re-predicted runs grouped into the accuracy page's tables: one per workload family, a line per slice, the
errors of the held-out runs only, and the host's own repeat floor where a setting was timed more than once."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from validate.accuracy.errors import ErrorStats, RepeatFloor, abs_stats, repeat_floor
from validate.accuracy.records import Row


@dataclass(frozen=True)
class Line:
    """One line of a family's table: its name, the time per token's and the first token's error statistics."""
    name: str
    tpot: ErrorStats | None
    ttft: ErrorStats | None


@dataclass(frozen=True)
class Table:
    """A family's table: its lines (every slice, then all held-out runs, then each setting timed in rounds against
    the median of its rounds), the files and dates of its runs, how many runs fitted a cost, the repeat floor."""
    family: str
    lines: tuple[Line, ...]
    files: tuple[str, ...]
    first_date: str
    last_date: str
    runs: int
    fitted: int
    floor: RepeatFloor | None


def line(name: str, rows: list[Row]) -> Line:
    return Line(name, abs_stats([r.tpot_err_pct for r in rows]), abs_stats([r.ttft_err_pct for r in rows]))


def median_of_rounds(rows: list[Row]) -> list[Row]:
    """One row per setting: the median of its measurements against its prediction (a setting's predictions are
    alike), in the order the settings first appear."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        groups.setdefault((r.slice,) + r.setting, []).append(r)
    return [replace(g[0], tpot_meas_s=statistics.median(r.tpot_meas_s for r in g),
                    ttft_meas_s=statistics.median(r.ttft_meas_s for r in g)) for g in groups.values()]


def table(family: str, rows: list[Row], rounds: dict[tuple, list[float]], by_file: bool = False) -> Table:
    """The family's table from its rows (held out or not) and the round times of settings (setting -> times);
    `by_file`: a line per recorded file too (each call ran the engine of its day)."""
    mine = [r for r in rows if r.family == family]
    held = [r for r in mine if r.held_out]
    lines = [line(s, [r for r in held if r.slice == s]) for s in sorted({r.slice for r in held})]
    lines.append(line("all held-out runs", held))
    medians = median_of_rounds(held)
    if len(medians) < len(held):
        lines.append(line("each setting against the median of its rounds", medians))
    if by_file:
        lines += [line(f"in `{f}`", [r for r in held if r.file == f]) for f in sorted({r.file for r in held})]
    settings = {r.setting for r in mine}
    return Table(family, tuple(lines), tuple(sorted({r.file for r in mine})), min(r.date for r in mine),
                 max(r.date for r in mine), len(held), len(mine) - len(held),
                 repeat_floor({k: v for k, v in rounds.items() if k in settings}))


def rounds_of_rows(rows: list[Row]) -> dict[tuple, list[float]]:
    """setting -> the time per token of every run of it (a setting run again within its call), from the rows."""
    out: dict[tuple, list[float]] = {}
    for r in rows:
        out.setdefault(r.setting, []).append(r.tpot_meas_s)
    return out
