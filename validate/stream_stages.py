"""The stage threads of a StreamRun (validate/stream_run.py): reader (storage -> host or pinned buffer), unpacker
(zstd workers), copier (a side CUDA stream into VRAM slots), each released by the simulator's own rules
(sim/run/pipeline.py) and recording its start and end."""
from __future__ import annotations

import torch

from sim.costs.tiers import TIER_ROWS
from sim.run.items import CPU_READ
from validate.store import decompress_into, read_into, views


class StageThreads:
    """The reader, unpacker and copier of a run; the state they share (events, pools, buffers, records) is the
    StreamRun's, set up in its __init__."""

    # -- the stage threads --------------------------------------------------------------------------------------
    def gate(self, k: int) -> None:
        """The simulator's rules (sim/run/pipeline.py): prefetch window, depth 0, router."""
        i = self.loads[k]
        if self.after[i] >= 0:
            self.finished[self.after[i]].wait()
        if self.window[i] >= 0:
            self.started[self.window[i]].wait()
        if self.sch.gate[i] >= 0:
            self.finished[int(self.sch.gate[i])].wait()

    def stops_before(self, i: int) -> bool:
        """Whether the run ends before item `i`: the first item of a step, after the decoding asked to halt."""
        d = self.decoding
        return d is not None and i > 0 and self.steps[i] != self.steps[i - 1] and d.halt.is_set()

    def stop_stages(self) -> None:
        """Let the stage threads return: the halt flag, and a stand-in in every pool a stage may be waiting on."""
        self.halted.set()
        vram = [(pool, self.e.slot_gpu.count(g), (None, None)) for g, pool in enumerate(self.vram_pools)]
        for pool, count, blank in ((self.pinned_pool, len(self.e.pinned_slots), None),
                                   (self.read_pool, len(self.e.read_slots), None), *vram):
            for _ in range(count):
                pool.put(blank)

    def stopping(self) -> bool:
        """A stage returns: a stage failed, or the run ended early (StreamRun.stop_stages)."""
        return bool(self.errors) or self.halted.is_set()

    def guarded(self, fn):
        def inner():
            try:
                fn()
            except BaseException as exc:  # surfaced by the compute thread
                self.errors.append(exc)
                for ev in self.ready + self.host_done + self.unpacked:
                    ev.set()
        return inner

    def reader(self) -> None:
        e, clock = self.e, self.clock
        for k, i in enumerate(self.loads):
            if not (self.read_b[i] > 0 or self.pin[i]):
                continue
            self.gate(k)
            name = self.names[self.units[i]]
            row = TIER_ROWS[e.tiers[name].tier]
            if self.pin[i]:
                self.staging[i] = self.pinned_pool.get()
            if self.stopping():
                return
            if self.read_b[i] > 0:
                t0 = clock.now()
                if row.packed_reads:
                    zbuf = self.read_pool.get()
                    if self.stopping():
                        return
                    read_into(e.store / e.files[name]["zst"], e.zmeta[name], torch.from_numpy(zbuf))
                    self.staging[i] = (self.staging[i], zbuf[: e.zmeta[name]["stored"]], zbuf)
                else:
                    buf = self.staging[i] if self.staging[i] is not None else e._host_buffer(e.meta[name]["nbytes"], False)
                    read_into(e.store / e.files[name]["raw"], e.meta[name], buf)
                    self.staging[i] = buf
                self.records.append((i, "read", "storage", t0, clock.now(), self.read_b[i], ""))
            self.host_done[i].set()

    def unpacker(self) -> None:
        e, clock = self.e, self.clock
        for k, i in enumerate(self.loads):
            if self.unpack_s[i] <= 0:
                continue
            if self.read_b[i] > 0 or self.pin[i]:
                self.host_done[i].wait()
            else:
                self.gate(k)
            if self.stopping():
                return
            name = self.names[self.units[i]]
            if not TIER_ROWS[e.tiers[name].tier].compressed:  # a peer's host work on a load: a pinned copy
                self.host_copy(i, name)
                continue
            src = self.staging[i]
            dest, packed, zbuf = (src if isinstance(src, tuple) else (src, e.packed[name], None))
            if dest is None:
                dest = e._host_buffer(e.meta[name]["nbytes"], False)
            t0 = clock.now()
            decompress_into(packed, e.zmeta[name], dest, self.pool)
            if zbuf is not None:
                self.read_pool.put(zbuf)
            self.records.append((i, "unpack", "unpack", t0, clock.now(), e.meta[name]["nbytes"], ""))
            self.staging[i] = dest
            self.unpacked[i].set()

    def host_copy(self, i: int, name: str) -> None:
        """The unpack stage of an uncompressed unit: the host copy a peer engine makes of every load (AirLLM's and
        Accelerate's pin_memory(), sim.engines.hosted: its memcpy speed), into a reused buffer; the unit's bytes
        stay where the reader left them."""
        e, clock = self.e, self.clock
        src = self.staging[i] if self.staging[i] is not None else e.host[name]
        nbytes = e.meta[name]["nbytes"]
        if self.scratch is None or self.scratch.numel() < nbytes:
            self.scratch = e._host_buffer(nbytes, True)
        t0 = clock.now()
        self.scratch[:nbytes].copy_(src[:nbytes])
        self.records.append((i, "unpack", "unpack", t0, clock.now(), nbytes, ""))
        self.unpacked[i].set()

    def copier(self, gpu: int = 0) -> None:
        """GPU `gpu`'s copier: its loads in order, on its copy stream into its VRAM slots."""
        e, clock = self.e, self.clock
        copy_stream, vram_pool = self.copy_streams[gpu], self.vram_pools[gpu]
        for k, i in enumerate(self.loads):
            if self.gpu[i] != gpu:
                continue
            name = self.names[self.units[i]]
            if self.unpack_s[i] > 0:
                self.unpacked[i].wait()
            elif self.read_b[i] > 0 or self.pin[i]:
                self.host_done[i].wait()
            else:
                self.gate(k)
            if self.stopping():
                return
            src = self.staging[i] if self.staging[i] is not None else e.host.get(name)
            if self.load[i] == CPU_READ:
                self.staging[i] = src
                self.wviews[i] = views(src, e.meta[name]["layout"])
                self.ready[i].set()
                continue
            if self.blocking[i] and i > 0:  # the simulator's rule: this copy starts after the previous compute ends
                self.finished[i - 1].wait()
                if self.comp_end[i - 1] is not None:
                    self.comp_end[i - 1].synchronize()
            slot, done = vram_pool.get()
            if self.stopping():
                return
            nbytes = e.meta[name]["nbytes"]
            if e.cuda:
                with torch.cuda.stream(copy_stream):
                    if done is not None:
                        copy_stream.wait_event(done)
                    e0 = clock.event(copy_stream)
                    slot[:nbytes].copy_(src[:nbytes], non_blocking=True)
                    e1 = clock.event(copy_stream)
                self.records.append((i, "copy", "copy", e0, e1, nbytes, ""))
                self.ready_ev[i] = e1
                if self.pin[i]:
                    e1.synchronize()
            else:
                t0 = clock.now()
                slot[:nbytes].copy_(src[:nbytes])
                self.records.append((i, "copy", "copy", t0, clock.now(), nbytes, ""))
            self.slot_of[i] = slot
            self.wviews[i] = views(slot, e.meta[name]["layout"])  # built here, off the compute thread
            if self.pin[i]:
                self.pinned_pool.put(self.staging[i])
            self.ready[i].set()
