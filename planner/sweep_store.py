"""A sweep's results file: JSON lines, a header naming what the sweep held fixed, then one row per combination in the
order they complete. A rerun with the same fixed inputs skips the combinations already in the file, so a sweep
stopped at any point resumes where it was."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from hwmodels.files import json_text
from hwmodels.units import InputError
from planner.sweep import Sweep, index_of


def header(sweep: Sweep) -> dict:
    """What a row's answer depends on besides its combination: the machine, the workload, the models, the keys."""
    fixed = {"machine": sweep.machine.model_dump(mode="json"), "workload": sweep.workload.model_dump(mode="json"),
             "models": {name: m.model_dump(mode="json") for name, m in sweep.models.items()}}
    digest = hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()[:16]
    return {"offloadsim_sweep": 1, "machine": sweep.machine.name, "models": sorted(sweep.models),
            "keys": sorted(sweep.vary), "fixed_sha256": digest}


def _lines(path: Path) -> Iterator[dict]:
    """The file's complete lines, parsed; a last line cut short by a stopped run is not one."""
    with path.open() as f:
        for line in f:
            if line.endswith("\n"):
                yield json.loads(line)


def read_rows(path: Path, sweep: Sweep) -> Iterator[dict]:
    """The rows in the file that belong to this sweep's grid (a file may hold a larger grid's rows)."""
    for i, row in enumerate(_lines(path)):
        if i and index_of(sweep.vary, row["combo"]) is not None:
            yield row


def open_results(path: Path, sweep: Sweep) -> tuple[set[int], IO[str]]:
    """The grid indices already answered in the file, and the file open for appending (created with its header).

    Raises InputError when the file is not a sweep's, or was written for other fixed inputs."""
    want = header(sweep)
    if path.exists() and path.stat().st_size:
        try:
            first = next(_lines(path), None)
            done = {index_of(sweep.vary, r["combo"]) for r in read_rows(path, sweep)}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise InputError(f"results: {str(path)!r} is not a sweep's results file; give a new file name.") from None
        if first != want:
            raise InputError(f"results: {str(path)!r} holds a sweep of other fixed inputs (machine, workload, models "
                             "or varied keys); give a new file, or the same settings to resume it.")
        _drop_partial_line(path)
        return done - {None}, path.open("a")
    f = path.open("w")
    f.write(json.dumps(want) + "\n")
    f.flush()
    return set(), f


def _drop_partial_line(path: Path) -> None:
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def append(f: IO[str], rows: list[dict]) -> None:
    """Rows written and flushed as one chunk completes."""
    f.write("".join(json_text(r, indent=None) + "\n" for r in rows))  # valid JSON: no NaN or Infinity
    f.flush()
