"""One run of a plan on the engine: the schedule's items through three stage threads and the compute thread.

reader (storage -> host or pinned buffer) -> unpacker (zstd workers) -> copier (a side CUDA stream into VRAM slots)
-> compute (the current stream, waiting on CUDA events). The stage threads are in validate/stream_stages.py. Which
earlier event releases each stage is the simulator's own rule (`sim/run/pipeline.py`); every stage records its start
and end with the simulator's event schema.
"""
from __future__ import annotations

import contextlib
import functools
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from hwmodels.topology import with_gpus
from sim.costs.tiers import TIER_ROWS
from sim.run.pipeline import rules
from sim.plan import Budgets, Workload
from sim.run.items import GPU_LOAD
from sim.run.placed import build_placed_schedule
from validate import model as M
from validate.devices import HostKV, StepState, hand_off, make_caches, move_kv, synchronize
from validate.recording import Clock, to_events
from validate.store import views
from validate.run_result import RunResult
from validate.stream_stages import StageThreads


class StreamRun(StageThreads):
    """The per-run state (events, pools, buffers) and one method per stage; `execute()` returns the RunResult."""

    def __init__(self, engine, w: Workload, prompt: torch.Tensor | None, decoding=None):
        """`decoding` (validate.decoding.Decoding): sampled tokens, handed out as made, a stop token; None: greedy,
        with every step's logits kept (validation)."""
        e, p = engine, engine.plan
        self.e, self.w, self.decoding = e, w, decoding
        machine = e.machine if e.machine.gpu_count >= p.gpu_count else with_gpus(e.machine, p.gpu_count)
        sch = self.sch = build_placed_schedule(e.shape, machine, p, w, Budgets.unlimited())
        self.gpu = sch.gpu.tolist()
        n = self.n = len(sch)
        self.units, self.steps = sch.unit.tolist(), sch.step.tolist()
        self.load, self.read_b = sch.load.tolist(), sch.read_bytes.tolist()
        self.unpack_s, self.pin = sch.unpack_s.tolist(), sch.pinned_slot.tolist()
        r = rules(sch, p.prefetch_depth, p.overlap_copy, p.vram_slots, p.pinned_slots)
        self.on_cpu, self.blocking = sch.on_cpu.tolist(), r.blocking.tolist()
        self.window, self.after = r.window.tolist(), r.after.tolist()
        self.names = [u.name for u in e.shape.units]
        self.prompt = prompt if prompt is not None else torch.randint(
            0, e.shape.vocab, (w.batch, w.prompt_tokens), generator=torch.Generator().manual_seed(w.seed))
        self.caches = make_caches(e, w, e.devices, e.gpu_of)
        # each GPU's static step tensors (its graphs capture over them); the hidden state moves between them
        self.pres = [StepState(e, d, w.batch, w.prompt_tokens, decode=False) for d in e.devices]
        self.decs = [StepState(e, d, w.batch, 1, decode=True) for d in e.devices]
        self.pre, self.dec, self.cur = self.pres[0], self.decs[0], 0
        self.start = 0
        self.graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        self.slot_index = {b.data_ptr(): j for j, b in enumerate(e.vram_slots)}
        self.clock: Clock | None = None
        self.copy_streams = [torch.cuda.Stream(d) if e.cuda else None for d in e.devices]
        self.compute_streams = [torch.cuda.current_stream(d) if e.cuda else None for d in e.devices]
        self.started, self.finished, self.host_done, self.unpacked, self.ready = (
            [threading.Event() for _ in range(n)] for _ in range(5))
        self.comp_end: list = [None] * n   # CUDA event at the end of each GPU compute
        self.ready_ev: list = [None] * n   # CUDA event at the end of each copy
        self.staging: list = [None] * n    # host buffer holding the item's bytes after read/unpack
        self.slot_of: list = [None] * n
        self.wviews: list = [None] * n     # the item's weight views, made by the copier
        self.records: list[tuple] = []     # (i, stage, resource, start, end, nbytes, detail); CUDA events resolved later
        self.loads = [i for i in range(n) if self.load[i]]
        self.pinned_pool, self.read_pool = queue.Queue(), queue.Queue()
        self.vram_pools = [queue.Queue() for _ in e.devices]  # each GPU's slots
        for b in e.pinned_slots:
            self.pinned_pool.put(b)
        for b in e.read_slots:
            self.read_pool.put(b)
        for b, g in zip(e.vram_slots, e.slot_gpu):
            self.vram_pools[g].put((b, None))
        self.errors: list[BaseException] = []
        self.scratch: torch.Tensor | None = None  # the host copy of a peer's load (StageThreads.host_copy)
        self.sync_each = (p.prefetch_depth == 0 or not p.overlap_copy) and any(x == GPU_LOAD for x in self.load)
        self.pool = ThreadPoolExecutor(e.unpack_threads)
        # logits leave the device asynchronously into pinned memory: no host wait inside the timed run
        self.logits_host = torch.empty((w.new_tokens if decoding is None else 0, w.batch, e.shape.vocab),
                                       dtype=torch.float32, pin_memory=e.cuda)
        self.halted = threading.Event()  # the run stopped early (a stop token): the stage threads return
        self.tokens: list[torch.Tensor] = []

    # -- the compute thread -------------------------------------------------------------------------------------
    def unit_step(self, kind: str, name: str, weights: dict, dev: torch.device, st: "StepState") -> None:
        """One unit's layer on `dev`, reading and writing the phase's static tensors: the embedding sets the hidden
        state and the rotary tables, a decoder its KV cache and the hidden state, the head the logits and token."""
        e = self.e
        if kind == "embedding":
            st.x.copy_(M.embed(st.ids.to(dev), weights))
            cos, sin = M.rope(st.pos if st.decode else st.positions, e.arch, torch.bfloat16)
            st.cos.copy_(cos)
            st.sin.copy_(sin)
        elif kind == "decoder":
            cache, start = self.caches[name], self.start
            cache = cache.dev if isinstance(cache, HostKV) else cache  # a cache in RAM: its copy on the GPU
            x, cos, sin = st.x.to(dev), st.cos.to(dev), st.sin.to(dev)
            if cache.k.device != dev:  # a CPU-placed layer computed on the GPU for a big step
                tmp = M.KVCache(e.arch, self.w.batch, cache.k.shape[2], dev, torch.bfloat16)
                if start:
                    move_kv(e.kv_stage, (cache.k, cache.v), (tmp.k, tmp.v), slice(0, start))
                x = M.decoder_layer(x, weights, e.arch, tmp, start, cos, sin)
                move_kv(e.kv_stage, (tmp.k, tmp.v), (cache.k, cache.v), slice(start, start + x.shape[1]))
            else:
                pos = None if not st.decode else st.pos if dev == st.pos.device else st.pos_cpu
                x = M.decoder_layer(x, weights, e.arch, cache, start, cos, sin, pos)
            st.x.copy_(x)
        else:
            out = M.head(st.x[:, -1:].to(dev), weights, e.arch)  # the last position's logits: move only its state
            st.logits.copy_(out)
            st.tok.copy_(out.argmax(-1))

    def set_inputs(self, s: int, st: "StepState") -> None:
        """The step's token ids and position, written into the static inputs before its first unit."""
        if s == 0:
            st.ids.copy_(self.prompt)
            self.start = 0
            return
        self.start = self.w.prompt_tokens + s - 1
        st.ids.copy_(self.tokens[-1][:, None])
        for d in self.decs:  # every GPU's decode position
            d.pos.fill_(self.start)
            d.pos_cpu.fill_(self.start)

    def forward(self, i: int, kind: str, name: str, weights: dict, dev: torch.device) -> None:
        """One unit at one step: a captured CUDA graph replayed where there is one (GPU-placed units), else eager."""
        s, gpu = self.steps[i], self.gpu[i]
        states = self.decs if s else self.pres
        st = states[gpu]
        if kind == "embedding":
            self.set_inputs(s, st)
        else:  # the compute moved to another GPU: its activations follow
            hand_off(states[self.cur], st)
        self.cur = gpu
        kv = self.caches.get(name)
        if isinstance(kv, HostKV):
            kv.copy_in(self.start)
        slot = self.slot_of[i]
        src = "vram" if name in self.e.resident else self.slot_index.get(slot.data_ptr()) if slot is not None else None
        g = self.graphs.get((name, bool(s), src)) if dev.type == "cuda" else None
        if g is not None:
            g.replay()
        else:
            self.unit_step(kind, name, weights, dev, st)
        if isinstance(kv, HostKV):
            kv.copy_back(self.start, st.x.shape[1])
        if kind == "lm_head":
            if self.decoding is not None:
                self.decoding.choose(s, st.logits, st.tok)
            else:
                self.logits_host[s].copy_(st.logits, non_blocking=True)
            self.tokens.append(st.tok.clone())

    def prepare(self) -> None:
        """Before the clock: the graphs, then one decode step of every other unit whose weights already sit where it
        computes (resident, or in RAM for a CPU-computed unit): the CPU's thread pool and kernels start there, as a
        warm process has them (measured on the H200, the first CPU step of a run took 25-75 ms more than the next).
        The caches are zeroed after."""
        e = self.e
        last = self.w.prompt_tokens + self.w.new_tokens - 1  # a position no step writes: masked until zeroed
        for d in self.decs:
            d.pos.fill_(last)
            d.pos_cpu.fill_(last)
        self.start = 0  # a prefill graph bakes its cache writes in: captured at position 0, where every prefill runs
        try:
            self.capture()
        except torch.OutOfMemoryError:  # the graphs' private pool did not fit beside the plan: run eagerly
            self.graphs.clear()
            torch.cuda.empty_cache()
        self.start = last
        graphed = {k[0] for k in self.graphs}
        for u in e.shape.units:  # weights where the unit computes: resident on the device, or in RAM for the CPU
            on_cpu, g = e.tiers[u.name].compute == "cpu", e.gpu_of[u.name]
            weights = e.host_views.get(u.name) if on_cpu else e.resident.get(u.name)
            if weights is not None and u.name not in graphed:
                self.unit_step(u.kind, u.name, weights, torch.device("cpu") if on_cpu else e.devices[g], self.decs[g])
        for c in self.caches.values():
            if isinstance(c, HostKV):
                c.zero_()
            else:
                c.k.zero_()
                c.v.zero_()
        self.start = 0
        synchronize(e.devices)

    def capture(self) -> None:
        """CUDA graphs of every GPU-placed unit for the prefill and the decode step, one per weight source (its
        resident weights, or each VRAM slot a streamed unit may land in): each unit is then one launch, so its time
        is the GPU's, not the interpreter's (a decoder is ~40 kernels: ~1.5 ms of dispatch against ~0.1 ms of GPU
        work at batch 1)."""
        e = self.e
        if not (e.cuda and e.graphs):
            return
        for gpu, dev in enumerate(e.devices):
            with torch.cuda.device(dev):
                self.capture_on(gpu, dev)

    def capture_on(self, gpu: int, dev: torch.device) -> None:
        """capture's graphs of the units on one GPU, over that GPU's step tensors and slots."""
        e = self.e
        pool, side, cur = torch.cuda.graph_pool_handle(), torch.cuda.Stream(dev), torch.cuda.current_stream(dev)
        phases = [(False, self.pres[gpu])] + ([(True, self.decs[gpu])] if self.w.new_tokens > 1 else [])
        for decode, st in phases:
            warmed: set[str] = set()
            for u in e.shape.units:
                p = e.tiers[u.name]
                if p.compute != "gpu" or e.gpu_of[u.name] != gpu:
                    continue
                sources = [("vram", e.resident[u.name])] if TIER_ROWS[p.tier].resident else \
                    [(j, views(b, e.meta[u.name]["layout"])) for j, b in enumerate(e.vram_slots) if e.slot_gpu[j] == gpu]
                for src, weights in sources:
                    def fn(kind=u.kind, name=u.name, weights=weights, st=st):
                        self.unit_step(kind, name, weights, dev, st)
                    if u.kind not in warmed:  # lazy initialisation (handles, workspaces) outside the capture
                        side.wait_stream(cur)
                        with torch.cuda.stream(side):
                            fn()
                        cur.wait_stream(side)
                        warmed.add(u.kind)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, pool=pool):
                        fn()
                    self.graphs[(u.name, decode, src)] = g

    def compute(self, i: int) -> None:
        e, clock, load = self.e, self.clock, self.load
        name, gpu = self.names[self.units[i]], self.gpu[i]
        stream = self.compute_streams[gpu]
        if load[i]:
            self.ready[i].wait()
            if self.errors:
                raise self.errors[0]
            if e.cuda and self.ready_ev[i] is not None:
                stream.wait_event(self.ready_ev[i])
            weights, self.wviews[i] = self.wviews[i], None
        else:
            weights = e.resident[name] if name in e.resident else e.host_views[name]
        dev = torch.device("cpu") if self.on_cpu[i] else e.devices[gpu]
        if dev.type == "cpu" and i > 0 and self.comp_end[i - 1] is not None:
            # its input is the GPU unit's output: the CPU starts when that ends (what this unit's compute would
            # block on anyway), so the time the GPU spent waiting for copies is not counted as this unit's compute
            self.comp_end[i - 1].synchronize()
        self.started[i].set()
        e0 = clock.event(stream) if dev.type == "cuda" else clock.now()
        with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():  # its GPU's graphs, streams
            self.forward(i, e.shape.units[self.units[i]].kind, name, weights, dev)
        if dev.type == "cuda":
            e1 = clock.event(stream)
            self.comp_end[i] = e1
            self.records.append((i, "compute", "gpu", e0, e1, 0.0, ""))
            if load[i] == GPU_LOAD:
                self.vram_pools[gpu].put((self.slot_of[i], e1))
            if self.sync_each:
                e1.synchronize()
        else:
            self.records.append((i, "compute", "cpu" if self.on_cpu[i] else "gpu", e0, clock.now(), 0.0, ""))
            if load[i] == GPU_LOAD:
                self.vram_pools[gpu].put((self.slot_of[i], None))
        self.finished[i].set()

    def execute(self):
        with torch.inference_mode():
            self.prepare()
        self.clock = Clock(self.e.cuda, self.e.devices)
        copiers = [functools.partial(self.copier, g) for g in range(len(self.e.devices))]  # one per GPU
        threads = [threading.Thread(target=self.guarded(f), daemon=True) for f in (self.reader, self.unpacker, *copiers)]
        for t in threads:
            t.start()
        failed = True
        if self.decoding is not None:
            self.decoding.start(self.w.new_tokens, self.w.batch, self.e.cuda)
        try:
            with torch.inference_mode():
                for i in range(self.n):
                    if self.stops_before(i):
                        self.stop_stages()
                        break
                    self.compute(i)
            synchronize(self.e.devices)
            failed = False
        finally:
            for ev in self.started + self.finished + self.ready + self.host_done + self.unpacked:
                ev.set()
            for t in threads:  # after a failure a stage may sit on an empty pool: do not wait for it
                t.join(timeout=1 if failed else 60)
            self.pool.shutdown()
            if self.decoding is not None:
                self.decoding.finish()
        if self.errors:
            raise self.errors[0]
        if self.halted.is_set():  # a stage may have copied once more before it saw the halt
            synchronize(self.e.devices)
        self.graphed = bool(self.graphs)
        self.graphs.clear()
        events = to_events(self.records, self.clock, self.sch, self.names)
        comp: dict[int, float] = {}
        for ev in events:
            if ev.stage == "compute":
                comp[ev.token] = max(comp.get(ev.token, 0.0), ev.end_s)
        ends = [comp[s] for s in sorted(comp)]
        ttft = ends[0]
        tpot = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else ttft
        logits = [t.clone() for t in self.logits_host]  # the device was synchronised above
        return RunResult(torch.stack([t.cpu() for t in self.tokens], dim=1), logits, events, ttft, tpot, ends[-1],
                         graphs=self.graphed)
