"""`offloadsim calibrate`: measure this machine and write a profile (a MachineSpec plus how it was measured).

Storage cold and warm reads by request size and threads, writes, host memcpy, pinned and pageable host-to-device
copies by size (CUDA), codec decode speed by threads (validate/calibrate_host.py), and per-layer compute for decode and
prefill fitted to the roofline, the engine-timed grids and copy contention (validate/calibrate_compute.py); the
profile's values from them (validate/calibrate_profile.py). On a CPU-only machine the CPU plays the GPU and the link
is memcpy.
"""
from __future__ import annotations

import datetime
import platform
from pathlib import Path

import torch
from tqdm import tqdm

from hwmodels.presets import load_machine
from hwmodels.profiles import ComputeGrid
from sim.costs.equations import copy_bytes_per_s
from sim.engines import engine_of
from sim.plan import Workload
from validate.accepted import accepted_overrides
from validate.calibrate_compute import CPU_ROUNDS, compute, contention, cpu_grids
from validate.calibrate_host import MiB, codec, first_touch, h2d, memcpy, pin_speed, storage
from validate.calibrate_profile import _overrides, kept_from_preset
from validate.compute_grid import measure_grids
from validate.engine_calibration import stage_speeds, stream_overheads

# the CPU grid a full calibration times: decode and prefill for 1-32 sequences (the planner's batches), prompts to 256
# tokens, so a prefill step of up to 32 x 256 = 8192 tokens is measured (a longer prompt is read as more sequences of
# 256, sim/costs/compute.py), not extrapolated from 64-token steps that are still bound by memory and overheads;
# the decode axis reaches 4096 cached tokens (12 decode samples a point: CPU times vary)
CPU_GRID = dict(batches=(1, 4, 16, 32), prompts=(16, 64, 256), layers=3, new_tokens=5, contexts=(1024, 4096))


def _measure(base: str, folder: Path, config: dict, quick: bool, cuda: bool, eager: bool = True,
             peers: tuple[str, ...] = ()) -> dict:
    m = load_machine(base)
    steps = ["storage", "memcpy", "pin", "link", "codec", "roofline", "grid-gpu", "grid-cpu", "contention",
             *(f"peer:{name}" for name in peers)]
    meas: dict = {}
    size = 64 * MiB if quick else 1024 * MiB
    link_sizes = (MiB, 16 * MiB, 128 * MiB) if quick else (MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB)
    gpu_grid = dict(batches=(1, 4), prompts=(8, 32), layers=2, new_tokens=3) if quick else {}
    cpu_grid = dict(batches=(1, 4), prompts=(8, 32), layers=2, new_tokens=3) if quick or not cuda else CPU_GRID
    with tqdm(steps, desc="calibrate", unit="step") as bar:
        for step in bar:
            bar.set_postfix_str(step)
            if step == "storage":
                meas["storage"] = storage(folder, size)
            elif step == "memcpy":
                meas["memcpy_bytes_per_s"] = memcpy(size)
            elif step == "pin":
                meas["pin_bytes_per_s"] = pin_speed(size) if cuda else None
                meas["first_touch_bytes_per_s"] = first_touch(size)
            elif step == "link":
                meas["link"] = h2d(link_sizes) if cuda else {}
            elif step == "codec":
                meas["codec"] = codec(16 * MiB if quick else 512 * MiB, (1, 2) if quick else (1, 2, 4, 8))
            elif step == "roofline":
                meas["compute"] = compute(config, "cuda" if cuda else "cpu", (1,), (1, 32))
            elif step == "grid-gpu":
                meas["grids"] = [g.model_dump() for g in measure_grids(config, m, "gpu", **(gpu_grid if cuda else cpu_grid))]
                if cuda and eager:  # the peers launch every kernel themselves
                    meas["grids"] += [g.model_dump() for g in measure_grids(config, m, "gpu", graphs=False, **gpu_grid)]
            elif step == "grid-cpu" and cuda:
                meas["grids"] += [g.model_dump() for g in cpu_grids(config, m, cpu_grid, CPU_ROUNDS)]
            elif step == "contention":
                meas["contention"] = contention(config, m, cuda) if cuda else None
            elif step.startswith("peer:"):  # an engine's own costs (Engine.calibrate, in its package)
                name = step.split(":", 1)[1]
                got, values = engine_of(name).calibrate(folder, config, quick)
                meas.update(got)
                meas.setdefault("peer_values", {}).update({f"peers.{name}.{k}": v for k, v in values.items()})
    return meas


def _in_engine(machine, folder: Path, quick: bool, meas: dict):
    """Stage speeds timed inside the engine replace the microbenchmarks' at the unit's size (copy speeds are scaled
    by size around the engine's point); then the per-item host cost is fitted. Returns (machine, overrides)."""
    cuda = torch.cuda.is_available()
    w = Workload(batch=1, prompt_tokens=16, new_tokens=4 if quick else 6)
    st = stage_speeds(meas["config"], machine, folder / ".calib-stages", w)
    meas["in_engine"] = st
    over = {"storage.cache_read_bytes_per_s": st["cache_read_bytes_per_s"],
            "storage.cold_read_bytes_per_s": min(st["cold_read_bytes_per_s"], st["cache_read_bytes_per_s"]),
            "cpu.unpack_bytes_per_s_per_thread": {"zstd": st["unpack_bytes_per_s_per_thread"]}}
    if cuda and machine.link.by_size:
        nb = st["unit_nbytes"]
        k_pin = st["pinned_copy_bytes_per_s"] / copy_bytes_per_s(nb, machine, pinned=True)
        k_page = st["pageable_copy_bytes_per_s"] / copy_bytes_per_s(nb, machine, pinned=False)
        over["link.by_size"] = [{"nbytes": p.nbytes, "pinned_bytes_per_s": p.pinned_bytes_per_s * k_pin,
                                 "pageable_bytes_per_s": p.pageable_bytes_per_s * k_page} for p in machine.link.by_size]
        over["link.pinned_h2d_bytes_per_s"] = st["pinned_copy_bytes_per_s"]
        over["link.pageable_h2d_bytes_per_s"] = st["pageable_copy_bytes_per_s"]
    machine = machine.with_overrides(**over)
    oh, startup = stream_overheads(meas["config"], machine, folder / ".calib-overhead", w)
    meas["stream_overhead_s"], meas["stream_startup_s"] = oh, startup
    machine = machine.model_copy(update={"engine": machine.engine.model_copy(
        update={"stream_overhead_s": oh, "stream_startup_s": startup})})
    return machine, over


def calibrate(base: str, folder: Path, config: dict, quick: bool = True, eager: bool = True,
              peers: tuple[str, ...] = ()) -> dict:
    """Measure and return {'machine': MachineSpec dump, 'calibration': {...}}. On a machine without CUDA the CPU
    plays the GPU: its grids are stored as the 'gpu' device, and the link is a host copy. `eager`: also time the GPU
    grid with eager launches (what the peer engines pay; not needed to validate offloadsim's own engine). `peers`:
    the engines whose own costs are timed too (Engine.calibrate; none by default)."""
    cuda = torch.cuda.is_available()
    # the engine times a tied head as its own matrix: the same bytes and work per unit (it refuses tied checkpoints)
    config = dict(config, tie_word_embeddings=False)
    meas = _measure(base, folder, config, quick, cuda, eager, tuple(peers))
    meas["config"] = config
    m = load_machine(base)
    over, noisy = accepted_overrides(_overrides(m, meas, cuda))
    grids = [ComputeGrid.model_validate(g) for g in meas["grids"]]
    machine = m.with_overrides(**over).model_copy(update={"compute_grids": tuple(grids)})
    machine, in_engine = _in_engine(machine, folder, quick, meas)
    over.update(in_engine)
    stamp = f"[M] offloadsim calibrate {'--quick ' if quick else ''}on {platform.node()}, {datetime.date.today()}"
    sources = dict(machine.sources, **{k: stamp for k in over})
    sources["compute_grids"] = stamp + " (engine-timed grids per unit kind)"
    sources["engine.stream_overhead_s"] = stamp + " (fitted on a tiny model streamed by the engine)"
    sources["engine.stream_startup_s"] = stamp + " (the same runs' first-token shortfall, median over tiers)"
    machine = machine.model_copy(update={"name": f"{m.name}-calibrated", "sources": sources})
    return {"machine": machine.model_dump(), "calibration": {
        "host": platform.node(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "method": "offloadsim calibrate: file reads after posix_fadvise(DONTNEED) (cold) and again (warm); numpy "
                  "memcpy; pinned allocation; torch pinned/pageable copies by size; zstd byte-plane decode; compute "
                  "grids timed inside the engine (batch x prompt, batch x context; validate/compute_grid.py); CPU "
                  "decoder time beside copies (contention); roofline fallback fitted from a synchronised layer" +
                  "".join(f"; {engine_of(n).label}'s costs ({engine_of(n).calibration_method})" for n in peers),
        "base_preset": base, "cuda": cuda, "torch": torch.__version__, "notes": noisy,
        "measurements": {k: v for k, v in meas.items() if k not in ("grids", "config", "peer_values")},
        "kept_from_preset": kept_from_preset(machine.model_dump(), set(over))}}
