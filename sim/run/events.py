"""Frozen event records: one per stage of one unit at one token; the common schema of simulator and engine."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from hwmodels.files import json_text, write_atomic

LANES = {"storage": 0, "unpack": 1, "copy": 2, "gpu": 3, "cpu": 4, "gpu_wait": 5, "cpu_wait": 6}


@dataclass(frozen=True, slots=True)
class Event:
    token: int
    unit: str
    stage: str      # read | unpack | copy | compute | wait
    resource: str   # storage | unpack | copy | gpu | cpu | gpu_wait | cpu_wait
    start_s: float
    end_s: float
    nbytes: float = 0.0
    detail: str = ""  # read: cold | cache | partial; wait: its cause

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def chrome_trace(events: list[Event], process: str = "offloadsim") -> dict:
    """Chrome trace JSON (opens in Perfetto / chrome://tracing): one thread per resource lane."""
    out = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": process}}]
    for lane, tid in LANES.items():
        out.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": lane}})
    for e in events:
        out.append({"name": f"{e.stage} {e.unit}", "cat": e.stage, "ph": "X", "pid": 1, "tid": LANES.get(e.resource, 9),
                    "ts": e.start_s * 1e6, "dur": max(e.duration_s, 0.0) * 1e6,
                    "args": {"token": e.token, "nbytes": e.nbytes, "detail": e.detail}})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_chrome_trace(events: list[Event], path: str | Path, process: str = "offloadsim") -> None:
    write_atomic(Path(path), json_text(chrome_trace(events, process), indent=None))
