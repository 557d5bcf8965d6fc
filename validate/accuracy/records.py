"""A recorded run re-predicted (one row of the accuracy tables), and reading a recorded call's file."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hwmodels.units import InputError
from validate.accuracy.errors import error_pct


@dataclass(frozen=True)
class Row:
    """One recorded run: what today's simulator predicts for it and what was measured (seconds; NaN where the run
    timed no such thing). `family` names its table and `slice` its line in it; `setting` is the same setting timed
    again within the call (its key for the repeat floor); `held_out`: no cost was fitted on this run."""
    family: str
    slice: str
    file: str
    date: str
    arch: str
    label: str
    tpot_pred_s: float
    tpot_meas_s: float
    ttft_pred_s: float
    ttft_meas_s: float
    held_out: bool
    setting: tuple

    @property
    def tpot_err_pct(self) -> float:
        return error_pct(self.tpot_pred_s, self.tpot_meas_s)

    @property
    def ttft_err_pct(self) -> float:
        return error_pct(self.ttft_pred_s, self.ttft_meas_s)


def read_call(path: Path) -> dict:
    """A recorded call (a lab campaign's JSON output: a date and a list of architectures), or InputError naming the
    file and the fix."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"recorded call {str(path)!r} cannot be read as JSON ({exc.__class__.__name__}); give a file "
                         "a lab campaign wrote (lab/data/...).") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("archs"), list) or "date" not in doc:
        raise InputError(f"recorded call {str(path)!r} holds no 'archs' list or no 'date'; give a file a lab campaign "
                         "wrote (lab/data/...).")
    return doc


def call_date(doc: dict) -> str:
    """The day a call ran (its 'date' field, 'YYYY-MM-DD hh:mm:ss'), as YYYY-MM-DD."""
    return str(doc["date"])[:10]
