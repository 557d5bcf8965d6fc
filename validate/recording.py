"""Recording: host perf_counter and CUDA events on one timeline, turned into the simulator's event records."""
from __future__ import annotations

import time

import torch

from sim.run.events import Event


class Clock:
    """Host perf_counter and CUDA events on one timeline (seconds from the run's start). With several GPUs each has
    its own base event, recorded with every GPU idle, so an event is timed against its own GPU's base."""

    def __init__(self, cuda: bool, devices=()):
        self.cuda = cuda
        self.bases: dict[int, torch.cuda.Event] = {}
        if cuda:
            devices = [d for d in devices if d.type == "cuda"] or [torch.device("cuda", torch.cuda.current_device())]
            for d in devices:
                torch.cuda.synchronize(d)
            for d in devices:
                self.bases.setdefault(d.index, torch.cuda.Event(enable_timing=True)).record(
                    torch.cuda.current_stream(d))
            for d in devices:
                torch.cuda.synchronize(d)
            self.base = next(iter(self.bases.values()))
        self.t0 = time.perf_counter()
        self.device_of: dict[int, int] = {}  # id of an event -> its GPU

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def event(self, stream=None):
        if not self.cuda:
            return self.now()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(stream)
        self.device_of[id(ev)] = stream.device.index if stream is not None else torch.cuda.current_device()
        return ev

    def seconds(self, ev) -> float:
        if not self.cuda:
            return ev
        return self.bases.get(self.device_of.get(id(ev)), self.base).elapsed_time(ev) / 1e3



def to_events(records, clock: Clock, sch, names) -> list[Event]:
    out = []
    for i, stage, res, a, b, nbytes, detail in records:
        start = clock.seconds(a) if not isinstance(a, float) else a
        end = clock.seconds(b) if not isinstance(b, float) else b
        out.append(Event(int(sch.step[i]), names[int(sch.unit[i])], stage, res, start, end, float(nbytes), detail))
    out.sort(key=lambda e: (e.start_s, e.end_s))
    # waits: the compute lane idle before a loaded item's compute
    prev_end = 0.0
    waits = []
    comps = sorted((e for e in out if e.stage == "compute"), key=lambda e: e.start_s)
    loaded = {(int(sch.step[i]), names[int(sch.unit[i])]) for i in range(len(sch)) if sch.load[i]}
    for e in comps:
        if (e.token, e.unit) in loaded and e.start_s > prev_end + 1e-6:
            waits.append(Event(e.token, e.unit, "wait", f"{e.resource}_wait", prev_end, e.start_s))
        prev_end = max(prev_end, e.end_s)
    return sorted(out + waits, key=lambda e: (e.start_s, e.end_s))
