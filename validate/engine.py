"""The streaming engine: executes a plan for real and records every stage with the simulator's event schema.

Resident units live on the device; streamed units go reader thread -> unpack thread (zstd workers) -> copier thread
(a dedicated CUDA stream into VRAM slots) while the compute thread runs layers on the compute stream, waiting on CUDA
events. Items, prefetch window and slots follow the same schedule the simulator uses. On a CPU-only machine the
device is the CPU and the copy stage is a host copy.
"""
from __future__ import annotations

import json
import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hwmodels.specs import MachineSpec
from sim.equations import STAGED_TIERS
from sim.events import Event
from sim.pipeline import rules
from sim.plan import Budgets, Plan, Workload
from sim.schedule import CPU_READ, GPU_LOAD, build_schedule
from sim.shapes import ModelShape
from validate import model as M
from validate.recording import Clock, to_events
from validate.store import decompress_into, drop_cache, file_meta, read_bytes, read_into, views

SWITCH_INTERVAL_S = 2e-4
RESERVED_CORES = 2  # CPU compute leaves a core each to the reader and copier threads (else one busy core stalls
                    # every intra-op barrier: 8.7x slower CPU layers beside copies on the H200 host, calibrate run 1)


@dataclass
class RunResult:
    tokens: torch.Tensor          # [batch, new_tokens]
    logits: list[torch.Tensor]    # per step, [batch, vocab] float32 on the CPU
    events: list[Event]
    ttft_s: float
    time_per_token_s: float
    total_s: float


class Engine:
    def __init__(self, store: Path | None, config: dict, shape: ModelShape, plan: Plan, machine: MachineSpec,
                 device: str | None = None, unpack_threads: int | None = None, cold: bool = False,
                 blobs: dict[str, tuple[torch.Tensor, list[dict]]] | None = None):
        """`store`: a layer store folder; or `blobs` (unit -> flat uint8 host tensor and its layout) for in-memory
        weights (calibration). `cold`: drop the store's pages first, so loading the resident tiers reads the disk.
        The time to place the weights (read, pin, copy to the device) is `load_s`."""
        self.store, self.shape, self.plan = Path(store) if store else None, shape, plan
        self.arch = M.Arch.from_config(config)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.cuda = self.device.type == "cuda"
        self.machine = machine
        self.unpack_threads = unpack_threads or machine.cpu.unpack_threads
        self.blobs = blobs
        if blobs is not None:
            self.files = {}
            self.meta = {n: {"nbytes": b.numel(), "stored": b.numel(), "layout": lay} for n, (b, lay) in blobs.items()}
            self.zmeta = {}
        else:
            self.files = json.loads((self.store / "store.json").read_text())["units"]
            self.meta = {n: file_meta(self.store / e["raw"]) for n, e in self.files.items()}
            self.zmeta = {n: file_meta(self.store / e["zst"]) for n, e in self.files.items() if "zst" in e}
        self.tiers = plan.tiers()
        if cold:
            self.drop_page_cache()
        if self.cuda:
            if hasattr(torch._C, "_host_emptyCache"):  # pin anew, as a fresh process does
                torch._C._host_emptyCache()
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        self._materialize()
        if self.cuda:
            torch.cuda.synchronize()
        self.load_s = time.perf_counter() - t0

    def _fill(self, name: str, buf: torch.Tensor) -> None:
        if self.blobs is not None:
            buf[: self.meta[name]["nbytes"]].copy_(self.blobs[name][0])
        else:
            read_into(self.store / self.files[name]["raw"], self.meta[name], buf)

    # -- placement -------------------------------------------------------------------------------------------
    def _host_buffer(self, nbytes: int, pinned: bool) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned and self.cuda)

    def _materialize(self) -> None:
        """Resident units on the device, RAM tiers in host memory (pinned, pageable or compressed), slots."""
        self.resident: dict[str, dict] = {}
        self.host: dict[str, torch.Tensor] = {}
        self.host_views: dict[str, dict] = {}
        self.packed: dict[str, np.ndarray] = {}
        for u in self.shape.units:
            p, meta = self.tiers[u.name], self.meta[u.name]
            if p.tier == "vram":
                buf = self._host_buffer(meta["nbytes"], False)
                self._fill(u.name, buf)
                self.resident[u.name] = views(buf.to(self.device), meta["layout"])
            elif p.tier in ("ram_pinned", "ram_pageable"):
                buf = self._host_buffer(meta["nbytes"], p.tier == "ram_pinned")
                self._fill(u.name, buf)
                self.host[u.name] = buf
                self.host_views[u.name] = views(buf, meta["layout"])
            elif p.tier == "ram_compressed":
                self.packed[u.name] = read_bytes(self.store / self.files[u.name]["zst"], self.zmeta[u.name])
        sch_units = [u.name for u in self.shape.units if self.tiers[u.name].tier != "vram"]
        slot = max((self.meta[n]["nbytes"] for n in sch_units), default=0)
        self.vram_slots = [torch.empty(slot, dtype=torch.uint8, device=self.device) for _ in range(self.plan.vram_slots)] if slot else []
        staged = [n for n in sch_units if self.tiers[n].tier in STAGED_TIERS]
        pslot = max((self.meta[n]["nbytes"] for n in staged), default=0)
        self.pinned_slots = [self._host_buffer(pslot, True) for _ in range(max(self.plan.pinned_slots, 1))] if pslot else []
        zslot = max((self.zmeta[n]["stored"] for n in sch_units if self.tiers[n].tier == "disk_compressed"), default=0)
        self.read_slots = []  # compressed reads land in reused, already touched buffers (no page faults per read)
        for _ in range(max(self.plan.pinned_slots, 1) if zslot else 0):
            buf = np.empty(zslot, dtype=np.uint8)
            buf.fill(0)
            self.read_slots.append(buf)

    def drop_page_cache(self) -> None:
        if self.store is None:
            return
        for e in self.files.values():
            for key in ("raw", "zst"):
                if key in e:
                    drop_cache(self.store / e[key])

    # -- the run -------------------------------------------------------------------------------------------------
    def run(self, w: Workload, prompt: torch.Tensor | None = None, cold: bool = False) -> RunResult:
        """Run the plan; the interpreter's thread switch interval is shortened meanwhile, because the default 5 ms
        lets one stage thread hold the GIL while another has its item ready (measured: 40 ms -> 5 ms per token on
        a 4-layer model streamed from pinned RAM)."""
        old, threads = sys.getswitchinterval(), torch.get_num_threads()
        det, det_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
        torch.use_deterministic_algorithms(True, warn_only=True)  # same plan, same logits, run after run
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        if self.cuda and any(p.compute == "cpu" for p in self.plan.placements):
            torch.set_num_threads(max(1, self.machine.cpu.cores - RESERVED_CORES))
        try:
            return self._run(w, prompt, cold)
        finally:
            sys.setswitchinterval(old)
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(det, warn_only=det_warn)

    def _run(self, w: Workload, prompt: torch.Tensor | None, cold: bool) -> RunResult:
        sch = build_schedule(self.shape, self.machine, self.plan, w, Budgets.unlimited())
        n = len(sch)
        units, steps = sch.unit.tolist(), sch.step.tolist()
        load, read_b, unpack_s, pin = sch.load.tolist(), sch.read_bytes.tolist(), sch.unpack_s.tolist(), sch.pinned_slot.tolist()
        p = self.plan
        r = rules(sch, p.prefetch_depth, p.overlap_copy, p.vram_slots, p.pinned_slots)
        on_cpu, blocking, window, after = sch.on_cpu.tolist(), r.blocking.tolist(), r.window.tolist(), r.after.tolist()
        comp_end: list = [None] * n     # CUDA event at the end of each GPU compute
        names = [u.name for u in self.shape.units]
        if prompt is None:
            prompt = torch.randint(0, self.shape.vocab, (w.batch, w.prompt_tokens), generator=torch.Generator().manual_seed(w.seed))
        if cold:
            self.drop_page_cache()
        caches = {}
        for u in self.shape.units:
            if u.kind == "decoder":
                dev = "cpu" if self.tiers[u.name].compute == "cpu" else self.device
                caches[u.name] = M.KVCache(self.arch, w.batch, w.prompt_tokens + w.new_tokens, dev, torch.bfloat16)
        clock = Clock(self.cuda)
        copy_stream = torch.cuda.Stream(self.device) if self.cuda else None
        compute_stream = torch.cuda.current_stream(self.device) if self.cuda else None
        started = [threading.Event() for _ in range(n)]
        finished = [threading.Event() for _ in range(n)]
        host_done = [threading.Event() for _ in range(n)]
        unpacked = [threading.Event() for _ in range(n)]
        ready = [threading.Event() for _ in range(n)]
        ready_ev: list = [None] * n
        staging: list = [None] * n      # host buffer holding the item's bytes after read/unpack
        slot_of: list = [None] * n
        wviews: list = [None] * n       # the item's weight views, made by the copier
        records: list[tuple] = []       # (i, stage, resource, start, end, nbytes, detail), CUDA events resolved later
        loads = [i for i in range(n) if load[i]]
        pinned_pool: queue.Queue = queue.Queue()
        for b in self.pinned_slots:
            pinned_pool.put(b)
        read_pool: queue.Queue = queue.Queue()
        for b in self.read_slots:
            read_pool.put(b)
        vram_pool: queue.Queue = queue.Queue()
        for b in self.vram_slots:
            vram_pool.put((b, None))
        d = self.plan.prefetch_depth
        errors: list[BaseException] = []
        sync_each = (d == 0 or not self.plan.overlap_copy) and any(x == GPU_LOAD for x in load)

        def gate(k: int) -> None:  # the simulator's rules (sim/pipeline.py): prefetch window, depth 0, router
            i = loads[k]
            if after[i] >= 0:
                finished[after[i]].wait()
            if window[i] >= 0:
                started[window[i]].wait()
            if sch.gate[i] >= 0:
                finished[int(sch.gate[i])].wait()

        def guarded(fn):
            def inner():
                try:
                    fn()
                except BaseException as exc:  # surfaced by the compute thread
                    errors.append(exc)
                    for e in ready + host_done + unpacked:
                        e.set()
            return inner

        def reader():
            for k, i in enumerate(loads):
                if not (read_b[i] > 0 or pin[i]):
                    continue
                gate(k)
                name = names[units[i]]
                tier = self.tiers[name].tier
                if pin[i]:
                    staging[i] = pinned_pool.get()
                if read_b[i] > 0:
                    t0 = clock.now()
                    if tier == "disk_compressed":
                        zbuf = read_pool.get()
                        read_into(self.store / self.files[name]["zst"], self.zmeta[name], torch.from_numpy(zbuf))
                        staging[i] = (staging[i], zbuf[: self.zmeta[name]["stored"]], zbuf)
                    else:
                        buf = staging[i] if staging[i] is not None else self._host_buffer(self.meta[name]["nbytes"], False)
                        read_into(self.store / self.files[name]["raw"], self.meta[name], buf)
                        staging[i] = buf
                    records.append((i, "read", "storage", t0, clock.now(), read_b[i], ""))
                host_done[i].set()

        pool = ThreadPoolExecutor(self.unpack_threads)

        def unpacker():
            for k, i in enumerate(loads):
                if unpack_s[i] <= 0:
                    continue
                if read_b[i] > 0 or pin[i]:
                    host_done[i].wait()
                else:
                    gate(k)
                name = names[units[i]]
                src = staging[i]
                dest, packed, zbuf = (src if isinstance(src, tuple) else (src, self.packed[name], None))
                if dest is None:
                    dest = self._host_buffer(self.meta[name]["nbytes"], False)
                t0 = clock.now()
                decompress_into(packed, self.zmeta[name], dest, pool)
                if zbuf is not None:
                    read_pool.put(zbuf)
                records.append((i, "unpack", "unpack", t0, clock.now(), self.meta[name]["nbytes"], ""))
                staging[i] = dest
                unpacked[i].set()

        def copier():
            for k, i in enumerate(loads):
                name = names[units[i]]
                if unpack_s[i] > 0:
                    unpacked[i].wait()
                elif read_b[i] > 0 or pin[i]:
                    host_done[i].wait()
                else:
                    gate(k)
                if errors:
                    return
                src = staging[i] if staging[i] is not None else self.host.get(name)
                if load[i] == CPU_READ:
                    staging[i] = src
                    wviews[i] = views(src, self.meta[name]["layout"])
                    ready[i].set()
                    continue
                if blocking[i] and i > 0:  # the simulator's rule: this copy starts after the previous compute ends
                    finished[i - 1].wait()
                    if comp_end[i - 1] is not None:
                        comp_end[i - 1].synchronize()
                slot, done = vram_pool.get()
                nbytes = self.meta[name]["nbytes"]
                if self.cuda:
                    with torch.cuda.stream(copy_stream):
                        if done is not None:
                            copy_stream.wait_event(done)
                        e0 = clock.event(copy_stream)
                        slot[:nbytes].copy_(src[:nbytes], non_blocking=True)
                        e1 = clock.event(copy_stream)
                    records.append((i, "copy", "copy", e0, e1, nbytes, ""))
                    ready_ev[i] = e1
                    if pin[i]:
                        e1.synchronize()
                else:
                    t0 = clock.now()
                    slot[:nbytes].copy_(src[:nbytes])
                    records.append((i, "copy", "copy", t0, clock.now(), nbytes, ""))
                slot_of[i] = slot
                wviews[i] = views(slot, self.meta[name]["layout"])  # built here, off the compute thread
                if pin[i]:
                    pinned_pool.put(staging[i])
                ready[i].set()

        threads = [threading.Thread(target=guarded(f), daemon=True) for f in (reader, unpacker, copier)]
        for t in threads:
            t.start()
        logits: list[torch.Tensor] = []
        tokens = []
        x = None
        failed = True
        try:
            with torch.inference_mode():
                for i in range(n):
                    s, name = steps[i], names[units[i]]
                    u = self.shape.units[units[i]]
                    if load[i]:
                        ready[i].wait()
                        if errors:
                            raise errors[0]
                        if self.cuda and ready_ev[i] is not None:
                            compute_stream.wait_event(ready_ev[i])
                    if load[i]:
                        w_ = wviews[i]
                        wviews[i] = None
                    else:
                        w_ = self.resident[name] if name in self.resident else self.host_views[name]
                    dev = torch.device("cpu") if on_cpu[i] else self.device
                    started[i].set()
                    e0 = clock.event(compute_stream if dev.type == "cuda" else None) if dev.type == "cuda" else clock.now()
                    if u.kind == "embedding":
                        ids = prompt if s == 0 else tokens[-1][:, None]
                        x = M.embed(ids.to(dev), w_)
                        start = 0 if s == 0 else w.prompt_tokens + s - 1
                        pos = torch.arange(start, start + ids.shape[1], device=self.device)
                        cos, sin = M.rope(pos, self.arch, torch.bfloat16)
                    elif u.kind == "decoder":
                        cache = caches[name]
                        if cache.k.device != dev:  # a CPU-placed layer computed on the GPU for a big step
                            tmp = M.KVCache(self.arch, w.batch, cache.k.shape[2], dev, torch.bfloat16)
                            tmp.k[:, :, :start], tmp.v[:, :, :start] = cache.k[:, :, :start], cache.v[:, :, :start]
                            x = M.decoder_layer(x.to(dev), w_, self.arch, tmp, start, cos.to(dev), sin.to(dev))
                            end = start + x.shape[1]
                            cache.k[:, :, start:end], cache.v[:, :, start:end] = tmp.k[:, :, start:end].cpu(), tmp.v[:, :, start:end].cpu()
                        else:
                            x = M.decoder_layer(x.to(dev), w_, self.arch, cache, start, cos.to(dev), sin.to(dev))
                    else:
                        out = M.head(x.to(dev), w_, self.arch)
                        logits.append(out.to("cpu"))
                        tokens.append(out.argmax(-1).to(self.device))
                    if dev.type == "cuda":
                        e1 = clock.event(compute_stream)
                        comp_end[i] = e1
                        records.append((i, "compute", "gpu", e0, e1, 0.0, ""))
                        if load[i] == GPU_LOAD:
                            vram_pool.put((slot_of[i], e1))
                        if sync_each:
                            e1.synchronize()
                    else:
                        records.append((i, "compute", "cpu" if on_cpu[i] else "gpu", e0, clock.now(), 0.0, ""))
                        if load[i] == GPU_LOAD:
                            vram_pool.put((slot_of[i], None))
                    finished[i].set()
            if self.cuda:
                torch.cuda.synchronize()
            failed = False
        finally:
            for e in started + finished + ready + host_done + unpacked:
                e.set()
            for t in threads:  # after a failure a stage may sit on an empty pool: do not wait for it
                t.join(timeout=1 if failed else 60)
            pool.shutdown()
        if errors:
            raise errors[0]
        events = to_events(records, clock, sch, names)
        comp = {}
        for e in events:
            if e.stage == "compute":
                comp[e.token] = max(comp.get(e.token, 0.0), e.end_s)
        ends = [comp[s] for s in sorted(comp)]
        ttft = ends[0]
        tpot = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else ttft
        return RunResult(torch.stack([t.cpu() for t in tokens], dim=1), logits, events, ttft, tpot, ends[-1])
