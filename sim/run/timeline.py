"""The SimPy timeline: read, unpack, copy and compute per unit with prefetch, staging slots and the page cache.

Resources: the storage queue (`reader_threads` reads at once), unpack workers (one decode at a time using all
threads), each GPU's host-to-device copy engine, the GPU stream and the CPU. Each GPU's VRAM slots are a Container; a pinned staging
slot is the one freed by the copy the rules name (`pin_from`, round robin in item order), so parallel readers cannot
take slots out of order. The host's memory is shared: while the copy engine runs, CPU compute progresses at
1 / `contention` of its speed (`HostMemory`; calibrate measures the factor as a CPU layer's time beside copies).
Each stage is a process that takes items in order, so every queue is FIFO.
"""
from __future__ import annotations

import simpy

from sim.run.events import Event
from sim.run.pipeline import link_after, rules
from sim.run.pagecache import PageCache
from sim.run.items import CPU_READ, GPU_LOAD, Schedule


class HostMemory:
    """The host's memory, shared by the copier and CPU compute: `busy` while a copy runs; `changed` fires (and is
    replaced) whenever that flips, so a CPU compute in progress re-rates its remaining work."""

    def __init__(self, env: simpy.Environment, contention: float):
        self.env, self.contention, self.busy = env, contention, False
        self.changed = env.event()

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        ev, self.changed = self.changed, self.env.event()
        ev.succeed()

    def cpu_work(self, work: float):
        """A process step: `work` seconds of CPU compute alone, slowed by `contention` while a copy runs."""
        f, env = self.contention, self.env
        t = env.now
        while True:
            busy = self.busy
            done = env.timeout(work * f if busy else work)
            fired = yield done | self.changed
            if done in fired:
                return
            work -= (env.now - t) / f if busy else env.now - t
            t = env.now


class Timeline:
    """Runs one schedule; `run()` returns the event records (nothing is kept on self after)."""

    def __init__(self, sch: Schedule, prefetch_depth: int, overlap_copy: bool, vram_slots: int, pinned_slots: int,
                 reader_threads: int = 1):
        self.rules = rules(sch, prefetch_depth, overlap_copy, vram_slots, pinned_slots)
        self.link_after = link_after(sch, self.rules, prefetch_depth).tolist()
        self.blocking = self.rules.blocking.tolist()
        self.sch = _Columns(sch)
        self.env = env = simpy.Environment()
        self.startup = env.timeout(sch.startup_s) if sch.startup_s > 0 else None
        self.storage = simpy.Resource(env, capacity=reader_threads)
        self.readers = reader_threads
        self.unpacker = simpy.Resource(env, capacity=1)
        gpus = int(max(sch.gpu.max(initial=0), 0)) + 1
        self.copy_engines = [simpy.Resource(env, capacity=1) for _ in range(gpus)]
        self.gpu = simpy.Resource(env, capacity=1)
        self.cpu = simpy.Resource(env, capacity=1)
        self.host_memory = HostMemory(env, sch.contention) if sch.contention != 1.0 else None
        self.vram_slots = [simpy.Container(env, capacity=vram_slots, init=vram_slots) for _ in range(gpus)]
        self.cache = PageCache(sch.cache_capacity_bytes, sch.warm_keys)
        sch = self.sch
        n = len(sch.unit)
        self.c_start = [env.event() for _ in range(n)]
        self.c_end = [env.event() for _ in range(n)]
        self.read_done = {i: env.event() for i in range(n) if sch.load[i] and (sch.read_bytes[i] > 0 or sch.pinned_slot[i])}
        self.unpack_done = {i: env.event() for i in range(n) if sch.unpack_s[i] > 0}
        self.ready = {i: env.event() for i in range(n) if sch.load[i]}
        self.loads = [i for i in range(n) if sch.load[i]]
        self.events: list[Event] = []

    def gate_events(self, k: int) -> list[simpy.Event]:
        """What must happen before the k-th load may start: the prefetch window and the router (sim/run/pipeline.py)."""
        i = self.loads[k]
        r = self.rules
        evs = [self.c_end[r.after[i]]] if r.after[i] >= 0 else []
        if self.startup is not None:  # the engine's stage threads deliver nothing before this
            evs.append(self.startup)
        if r.window[i] >= 0:
            evs.append(self.c_start[r.window[i]])
        g = self.sch.gate[i]
        if g >= 0:
            evs.append(self.c_end[g])
        return evs

    def record(self, i: int, stage: str, resource: str, start: float, nbytes: float = 0.0, detail: str = "") -> None:
        s = self.sch
        self.events.append(Event(s.step[i], s.names[s.unit[i]], stage, resource, start, self.env.now, nbytes, detail))

    def reader(self, queue: simpy.Store):
        s = self.sch
        while True:
            k = yield queue.get()
            if k is None:
                return
            i = self.loads[k]
            yield self.env.all_of(self.gate_events(k))
            if s.pinned_slot[i] and self.rules.pin_from[i] >= 0:  # its slot: the one that item's copy frees
                yield self.ready[self.rules.pin_from[i]]
            if s.read_bytes[i] <= 0:
                self.read_done[i].succeed()
                continue
            with self.storage.request() as req:
                yield req
                t0 = self.env.now
                nbytes = s.read_bytes[i]
                found = self.cache.read(s.unit[i], nbytes)  # resident bytes at the cache speed, the rest from disk
                cold = (nbytes - found) / (s.cache_bytes_per_s if s.loader_faults else s.cold_bytes_per_s)
                yield self.env.timeout(s.read_latency_s + found / s.cache_bytes_per_s + cold)
                detail = "cache" if found >= nbytes else "cold" if found == 0 else "partial"
                self.record(i, "read", "storage", t0, nbytes, detail)
            self.read_done[i].succeed()

    def unpack(self):
        s = self.sch
        for k, i in enumerate(self.loads):
            if s.unpack_s[i] <= 0:
                continue
            if i in self.read_done:
                yield self.read_done[i]
            else:
                yield self.env.all_of(self.gate_events(k))
            with self.unpacker.request() as req:
                yield req
                t0 = self.env.now
                yield self.env.timeout(s.unpack_s[i])
                self.record(i, "unpack", "unpack", t0, s.copy_bytes[i])
            self.unpack_done[i].succeed()

    def copier(self, g: int):
        """GPU g's copy engine: its loads in order."""
        s = self.sch
        for k, i in enumerate(self.loads):
            if s.gpu[i] != g:
                continue
            if s.unpack_s[i] > 0:
                yield self.unpack_done[i]
            elif i in self.read_done:
                yield self.read_done[i]
            else:
                yield self.env.all_of(self.gate_events(k))
            if s.load[i] == CPU_READ:
                self.ready[i].succeed()
                continue
            if self.blocking[i] and i > 0:
                yield self.c_end[i - 1]
            yield self.vram_slots[g].get(1)
            with self.copy_engines[g].request() as req:
                yield req
                t0 = self.env.now
                if self.host_memory is not None:
                    self.host_memory.set_busy(True)
                yield self.env.timeout(s.copy_s[i])
                if self.host_memory is not None:
                    self.host_memory.set_busy(False)
                self.record(i, "copy", "copy" if g == 0 else f"copy{g}", t0, s.copy_bytes[i])  # each GPU's own
            self.ready[i].succeed()

    def compute(self):
        s = self.sch
        for i in range(len(s.unit)):
            dev = "cpu" if s.on_cpu[i] else "gpu"
            if s.load[i]:
                t0 = self.env.now
                yield self.ready[i]
                if self.env.now > t0:
                    self.record(i, "wait", f"{dev}_wait", t0)
            with (self.cpu if s.on_cpu[i] else self.gpu).request() as req:
                yield req
                self.c_start[i].succeed()
                if s.overhead_s[i] > 0:  # the engine's host cost before the unit's kernels start: the compute lane
                    t0 = self.env.now  # idles, recorded as the engine records it (a wait before a loaded compute)
                    yield self.env.timeout(s.overhead_s[i])
                    self.record(i, "wait", f"{dev}_wait", t0, detail="engine")
                    if s.fault_s[i] > 0:  # its loader faulting the weights in from disk, first (AirLLM cold)
                        self.events.append(Event(s.step[i], s.names[s.unit[i]], "read", "storage", t0,
                                                 t0 + s.fault_s[i], s.read_bytes[i], "cold"))
                t0 = self.env.now
                if s.on_cpu[i] and self.host_memory is not None:
                    yield from self.host_memory.cpu_work(s.compute_s[i])
                elif s.link_at_s[i] >= 0:  # its transfer to the GPU waits for the copies queued before it
                    yield self.env.timeout(s.link_at_s[i])
                    if self.link_after[i] >= 0:
                        yield self.ready[self.link_after[i]]
                    yield self.env.timeout(s.compute_s[i] - s.link_at_s[i])
                else:
                    yield self.env.timeout(s.compute_s[i])
                self.record(i, "compute", dev, t0)
            if s.load[i] == GPU_LOAD:
                yield self.vram_slots[s.gpu[i]].put(1)
            self.c_end[i].succeed()

    def run(self) -> list[Event]:
        queue = simpy.Store(self.env)
        for k, i in enumerate(self.loads):
            if i in self.read_done:
                queue.put(k)
        for _ in range(self.readers):
            queue.put(None)
            self.env.process(self.reader(queue))
        self.env.process(self.unpack())
        for g in range(len(self.copy_engines)):
            self.env.process(self.copier(g))
        self.env.process(self.compute())
        self.env.run()
        return self.events


class _Columns:
    """A schedule's columns as lists, with its scalars, for fast access inside the processes."""

    def __init__(self, sch: Schedule):
        self.__dict__.update(sch.column_lists())
        self.names = sch.names
        for name in ("read_latency_s", "cold_bytes_per_s", "cache_bytes_per_s", "cache_capacity_bytes", "warm_keys",
                     "contention", "loader_faults"):
            setattr(self, name, getattr(sch, name))
