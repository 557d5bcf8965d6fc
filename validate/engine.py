"""The streaming engine: executes a plan for real and records every stage with the simulator's event schema.

Resident units live on the device; streamed units go reader thread -> unpack thread (zstd workers) -> copier thread
(a dedicated CUDA stream into VRAM slots) while the compute thread runs layers on the compute stream, waiting on CUDA
events. Items, prefetch window and slots follow the same schedule the simulator uses. On a CPU-only machine the
device is the CPU and the copy stage is a host copy. A plan over several GPUs keeps each unit on its GPU, with
VRAM slots per GPU (validate/devices.py).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from hwmodels.specs import MachineSpec
from sim.costs.tiers import TIER_ROWS
from sim.costs.memory import offload_kv_copy_bytes, streamed_units
from sim.plan import Plan, Workload
from sim.model.shapes import ModelShape
from validate import model as M
from validate.devices import plan_devices, unit_gpus
from validate.store import drop_cache, file_meta, read_bytes, read_into, views
from validate.run_result import RunResult
from validate.stream_run import StreamRun

SWITCH_INTERVAL_S = 2e-4
RESERVED_CORES = 2  # CPU compute leaves a core each to the reader and copier threads (else one busy core stalls
                    # every intra-op barrier: 8.7x slower CPU layers beside copies on the H200 host, calibrate run 1)


class Engine:
    def __init__(self, store: Path | None, config: dict, shape: ModelShape, plan: Plan, machine: MachineSpec,
                 device: str | None = None, unpack_threads: int | None = None, cold: bool = False,
                 blobs: dict[str, tuple[torch.Tensor, list[dict]]] | None = None, graphs: bool = True):
        """`store`: a layer store folder; or `blobs` (unit -> flat uint8 host tensor and its layout) for in-memory
        weights (calibration). `cold`: drop the store's pages first, so loading the resident tiers reads the disk.
        The time to place the weights (read, pin, copy to the device) is `load_s`. `graphs`: GPU-placed units run
        as captured CUDA graphs (one launch each); False runs every kernel eagerly (the peers' dispatch)."""
        self.store, self.shape, self.plan = Path(store) if store else None, shape, plan
        self.arch = M.Arch.from_config(config)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if self.device.type == "cuda" and self.device.index is None:  # 'cuda' != 'cuda:0' when compared: name it
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.cuda = self.device.type == "cuda"
        self.devices, self.gpu_of = plan_devices(plan, self.device), unit_gpus(shape, plan)
        self.machine = machine
        self.unpack_threads = unpack_threads or machine.cpu.unpack_threads
        self.blobs = blobs
        self.graphs = graphs
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
        # what other engines of the process hold: not this engine's (RunResult.gpu_peak_bytes)
        self.gpu_base_bytes = [torch.cuda.memory_allocated(d) if self.cuda else 0 for d in self.devices]
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
            row, meta = TIER_ROWS[self.tiers[u.name].tier], self.meta[u.name]
            if row.resident:
                buf = self._host_buffer(meta["nbytes"], False)
                self._fill(u.name, buf)
                self.resident[u.name] = views(buf.to(self.devices[self.gpu_of[u.name]]), meta["layout"])
            elif row.in_ram and not row.compressed:
                buf = self._host_buffer(meta["nbytes"], row.pinned_home)
                self._fill(u.name, buf)
                self.host[u.name] = buf
                self.host_views[u.name] = views(buf, meta["layout"])
            elif row.in_ram:
                self.packed[u.name] = read_bytes(self.store / self.files[u.name]["zst"], self.zmeta[u.name])
        sch_units = [u.name for u in self.shape.units if not TIER_ROWS[self.tiers[u.name].tier].resident]
        self.vram_slots: list[torch.Tensor] = []
        self.slot_gpu: list[int] = []  # the GPU index of each VRAM slot
        self.kv_stage = self._host_buffer(0, False)
        self._size_slots(None)
        staged = [n for n in sch_units if TIER_ROWS[self.tiers[n].tier].staged]
        pslot = max((self.meta[n]["nbytes"] for n in staged), default=0)
        self.pinned_slots = [self._host_buffer(pslot, True) for _ in range(max(self.plan.pinned_slots, 1))] if pslot else []
        zslot = max((self.zmeta[n]["stored"] for n in sch_units if TIER_ROWS[self.tiers[n].tier].packed_reads),
                    default=0)
        self.read_slots = []  # compressed reads land in reused, already touched buffers (no page faults per read)
        for _ in range(max(self.plan.pinned_slots, 1) if zslot else 0):
            buf = np.empty(zslot, dtype=np.uint8)
            buf.fill(0)
            self.read_slots.append(buf)

    def _size_slots(self, w: Workload | None) -> None:
        """VRAM staging slots for the units that pass through them (sim.costs.memory.streamed_units: GPU-computed units
        not resident, and with `w`, the CPU units a big prompt multiplies on the GPU), as the memory model counts
        them: none when nothing streams; grown before a run whose prompt offloads a larger unit."""
        slot = max((self.meta[n]["nbytes"] for n in streamed_units(self.shape, self.plan, w)), default=0)
        if slot > (self.vram_slots[0].numel() if self.vram_slots else 0):
            self.vram_slots = []  # freed before the larger ones are taken; each GPU its own
            self.vram_slots = [torch.empty(slot, dtype=torch.uint8, device=d)
                               for d in self.devices for _ in range(self.plan.vram_slots)]
            self.slot_gpu = [g for g in range(len(self.devices)) for _ in range(self.plan.vram_slots)]
        # the pinned host buffer a CPU layer's K and V pass through, one at a time, to and from the GPU
        stage = offload_kv_copy_bytes(self.shape, self.plan, w) // 2 if w is not None and self.cuda else 0
        if stage > self.kv_stage.numel():
            self.kv_stage = self._host_buffer(0, False)  # freed before the larger one is pinned
            self.kv_stage = self._host_buffer(stage, True)

    def drop_page_cache(self) -> None:
        if self.store is None:
            return
        for e in self.files.values():
            for key in ("raw", "zst"):
                if key in e:
                    drop_cache(self.store / e[key])

    # -- the run -------------------------------------------------------------------------------------------------
    def run(self, w: Workload, prompt: torch.Tensor | None = None, cold: bool = False, decoding=None) -> RunResult:
        """Run the plan (`decoding`: validate.decoding.Decoding, how tokens are chosen and handed out); the
        interpreter's thread switch interval is shortened meanwhile, because the default 5 ms lets one stage thread
        hold the GIL while another has its item ready (measured: 40 ms -> 5 ms per token on a 4-layer model streamed
        from pinned RAM)."""
        old, threads = sys.getswitchinterval(), torch.get_num_threads()
        cudnn_sdp = torch.backends.cuda.cudnn_sdp_enabled()
        # no cuDNN attention: it builds an execution plan for every new KV length (40-60 ms each on the H200,
        # lab/journal/peers.md), which made decode timings depend on which lengths the process had seen before
        torch.backends.cuda.enable_cudnn_sdp(False)
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        if self.cuda and any(p.compute == "cpu" for p in self.plan.placements):
            torch.set_num_threads(max(1, self.machine.cpu.cores - RESERVED_CORES))
        try:
            return self._run(w, prompt, cold, decoding)
        finally:
            sys.setswitchinterval(old)
            torch.set_num_threads(threads)
            torch.backends.cuda.enable_cudnn_sdp(cudnn_sdp)

    def _run(self, w: Workload, prompt: torch.Tensor | None, cold: bool, decoding) -> RunResult:
        if cold:
            self.drop_page_cache()
        self._size_slots(w)
        if not self.cuda:
            return StreamRun(self, w, prompt, decoding).execute()
        for d in self.devices:
            torch.cuda.synchronize(d)
            torch.cuda.reset_peak_memory_stats(d)
        out = StreamRun(self, w, prompt, decoding).execute()
        for d in self.devices:
            torch.cuda.synchronize(d)
        out.gpu_peak_bytes = max(torch.cuda.max_memory_allocated(d) - base  # the fullest GPU's, as predicted
                                 for d, base in zip(self.devices, self.gpu_base_bytes))
        return out
