"""`offloadsim calibrate`: measure this machine and write a profile (a MachineSpec plus how it was measured).

Storage cold and warm reads by request size and threads, writes, host memcpy, pinned and pageable host-to-device
copies by size (CUDA), codec decode speed by threads, and per-layer compute for decode and prefill fitted to the
roofline (bandwidth, FLOP/s, overhead per launch). On a CPU-only machine the CPU plays the GPU and the link is memcpy.
"""
from __future__ import annotations

import datetime
import os
import platform
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from hwmodels.presets import load_machine
from sim.analysis.interval import CALIBRATE_ROUNDS  # the prediction interval reads a grid's spread as that many draws
from sim.engines import engine_of
from validate.accepted import accepted_overrides, fastest_rate
from validate.store import drop_cache
from validate.store import CHUNK, decompress_into, _planes
from sim.model.families import shape_from_config
from validate import model as M
from sim.plan import Workload
from sim.engines.common import make_plan
from validate.compute_grid import random_blobs, unit_times
from validate.engine import Engine
from validate.compute_grid import measure_grids, median_grids
from sim.costs.equations import copy_bytes_per_s
from validate.engine_calibration import stage_speeds, stream_overheads
from hwmodels.profiles import ComputeGrid

MiB = 2**20


def _rounds(fn, reps: int = 3) -> list[float]:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def _best(fn, reps: int = 3) -> float:
    return min(_rounds(fn, reps))


def storage(folder: Path, nbytes: int, sizes=(MiB, 16 * MiB)) -> dict:
    out = {}
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=folder, prefix=".calib-")
    path = Path(name)
    data = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    try:
        t = time.perf_counter()
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        out["write_bytes_per_s"] = nbytes / (time.perf_counter() - t)
        buf = bytearray(nbytes)

        def read(size: int, threads: int = 1) -> float:
            def part(k: int) -> None:
                with open(path, "rb", buffering=0) as fh:
                    lo, hi = k * nbytes // threads, (k + 1) * nbytes // threads
                    fh.seek(lo)
                    mv = memoryview(buf)[lo:hi]
                    for off in range(0, hi - lo, size):
                        fh.readinto(mv[off:off + size])
            t = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(part, range(threads)))
            return nbytes / (time.perf_counter() - t)

        for size in sizes:
            drop_cache(path)
            out[f"cold_read_{size // MiB}MiB_bytes_per_s"] = read(size)
            out[f"warm_read_{size // MiB}MiB_bytes_per_s"] = read(size)
        drop_cache(path)
        out["cold_read_4threads_bytes_per_s"] = read(16 * MiB, 4)
        drop_cache(path)  # whole-file requests, as the engine reads a unit
        out["cold_read_whole_bytes_per_s"] = read(nbytes)
        out["warm_read_whole_bytes_per_s"] = read(nbytes)
        out["cold_read_bytes_per_s"] = out["cold_read_whole_bytes_per_s"]
        out["cache_read_bytes_per_s"] = out["warm_read_whole_bytes_per_s"]
        out["map_touch_bytes_per_s"] = map_touch(path, nbytes)
    finally:
        path.unlink(missing_ok=True)
    return out


def map_touch(path: Path, nbytes: int) -> float:
    """Bytes per second of mapping a file's page-cache pages into a fresh memory map, one byte read per page (the
    page-table work an engine pays when it uses mapped weights in place, e.g. Accelerate's np.memmap disk offload).
    A lower bound of that cost: engines that map each tensor anew pay more (lab/probes/h200_map_touch.py)."""
    def once() -> None:
        m = np.memmap(path, dtype=np.uint8, mode="r")
        int(m[::4096].sum())
        del m
    return nbytes / _best(once)


def memcpy(nbytes: int) -> float:
    a = np.ones(nbytes, dtype=np.uint8)
    b = np.empty_like(a)
    return nbytes / _best(lambda: np.copyto(b, a))


def first_touch(nbytes: int) -> float:
    """Bytes per second of writing freshly allocated host memory (page faults): what filling a new buffer costs."""
    t = time.perf_counter()
    buf = torch.empty(nbytes, dtype=torch.uint8)
    buf.numpy().fill(1)
    dt = time.perf_counter() - t
    del buf
    return nbytes / dt


def h2d(sizes, total: int = 2 * 1024 * MiB) -> dict:
    """Copy speed by size from pinned and pageable memory, each copy from a different buffer of a set larger than
    the CPU caches (as an engine streams different layers), median over the set."""
    out = {}
    for size in sizes:
        dev = torch.empty(size, dtype=torch.uint8, device="cuda")
        n = max(3, min(16, total // size))
        for pinned in (True, False):
            hosts = [torch.ones(size, dtype=torch.uint8, pin_memory=pinned) for _ in range(n)]
            times = []
            for h in hosts + hosts:
                torch.cuda.synchronize()
                t = time.perf_counter()
                dev.copy_(h, non_blocking=True)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
            out[f"{'pinned' if pinned else 'pageable'}_{size // MiB}MiB_bytes_per_s"] = size / float(np.median(times[n:]))
            del hosts
    return out


def codec(nbytes: int, threads=(1, 2, 4)) -> dict:
    import zstandard
    w = (torch.randn(nbytes // 2) * 0.02).to(torch.bfloat16).view(torch.uint8).numpy()
    planes = _planes(w)
    c = zstandard.ZstdCompressor(level=3)
    chunks = [c.compress(planes[i:i + CHUNK].tobytes()) for i in range(0, len(planes), CHUNK)]
    packed = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    meta = {"chunks": [len(x) for x in chunks], "nbytes": nbytes}
    dest = torch.empty(nbytes, dtype=torch.uint8)
    out = {"ratio": packed.size / nbytes}
    for n in threads:
        with ThreadPoolExecutor(n) as pool:
            out[f"decode_{n}threads_bytes_per_s"] = nbytes / _best(lambda: decompress_into(packed, meta, dest, pool))
    assert torch.equal(dest, torch.from_numpy(w))
    return out


def compute(config: dict, device: str, batch_sizes=(1, 4), seqs=(1, 128)) -> dict:
    """Time the engine's decoder layer on real-shape random weights: decode and prefill, fit the roofline."""
    arch = M.Arch.from_config(config)
    unit = next(u for u in shape_from_config(config).units if u.kind == "decoder")
    h, inter, d = arch.hidden, config["intermediate_size"], arch.head_dim
    shapes = {"input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
              "self_attn.q_proj.weight": (arch.heads * d, h), "self_attn.k_proj.weight": (arch.kv_heads * d, h),
              "self_attn.v_proj.weight": (arch.kv_heads * d, h), "self_attn.o_proj.weight": (h, arch.heads * d),
              "mlp.gate_proj.weight": (inter, h), "mlp.up_proj.weight": (inter, h), "mlp.down_proj.weight": (h, inter)}
    if arch.qk_norm:
        shapes.update({"self_attn.q_norm.weight": (d,), "self_attn.k_norm.weight": (d,)})
    w = {k: (torch.randn(s, device=device) * 0.02).to(torch.bfloat16) for k, s in shapes.items()}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out = {}
    with torch.inference_mode():
        for b in batch_sizes:
            for s in seqs:
                cache = M.KVCache(arch, b, s + 1, device, torch.bfloat16)
                x = torch.randn(b, s, h, device=device).to(torch.bfloat16)
                pos = torch.arange(s, device=device)
                cos, sin = M.rope(pos, arch, torch.bfloat16)

                def run():
                    M.decoder_layer(x, w, arch, cache, 0, cos, sin)
                    sync()
                run()
                out[f"layer_b{b}_s{s}_rounds_s"] = _rounds(run, 5)
                out[f"layer_b{b}_s{s}_s"] = min(out[f"layer_b{b}_s{s}_rounds_s"])
        # decode as the engine runs it: 8 layers back to back, one synchronisation (dispatch overlaps the device)
        cache = M.KVCache(arch, 1, 2, device, torch.bfloat16)
        x = torch.randn(1, 1, h, device=device).to(torch.bfloat16)
        cos, sin = M.rope(torch.arange(1, device=device), arch, torch.bfloat16)

        def seq():
            for _ in range(8):
                M.decoder_layer(x, w, arch, cache, 0, cos, sin)
            sync()
        seq()
        out["layer_b1_s1_in_sequence_s"] = _best(seq, 3) / 8
    t1 = out["layer_b1_s1_s"]
    flops_pf = unit.flops(max(batch_sizes), max(seqs), 0)
    rounds_pf = out[f"layer_b{max(batch_sizes)}_s{max(seqs)}_rounds_s"]
    return {"measured": out, "layer_nbytes": unit.nbytes, "layer_launches": unit.launches,
            "decode_bytes_per_s": unit.nbytes / t1, "prefill_flops_per_s": fastest_rate(flops_pf, rounds_pf)}


def pin_speed(nbytes: int) -> float:
    """Bytes per second of allocating page-locked host memory (a fresh size, so no cached block is reused)."""
    if hasattr(torch._C, "_host_emptyCache"):
        torch._C._host_emptyCache()  # a fresh process pins anew; release blocks cached by earlier steps
    t = time.perf_counter()
    buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dt = time.perf_counter() - t
    del buf
    return nbytes / dt


def contention(config: dict, machine, cuda: bool) -> dict:
    """CPU decoder time alone and while host-to-device copies (or, without CUDA, memcpys) run beside it."""
    import threading
    cfg = dict(config, num_hidden_layers=2)
    cfg.pop("rope_scaling", None)
    shape = shape_from_config(cfg)
    names = [u.name for u in shape.units]
    plan = make_plan(shape, machine, "calibrate", {n: "ram_pageable" for n in names}, {n: "cpu" for n in names})
    engine = Engine(None, cfg, shape, plan, machine, blobs=random_blobs(cfg, shape, "cuda" if cuda else "cpu"))
    kinds = {u.name: u.kind for u in shape.units}
    w = Workload(batch=1, prompt_tokens=8, new_tokens=6)

    def decoder_s() -> float:
        ev = engine.run(w).events
        return float(np.median([t for (s, k), v in unit_times(ev, kinds).items() if s > 0 and k == "decoder" for t in v]))
    decoder_s()
    alone = decoder_s()
    stop = threading.Event()
    src = torch.ones(64 * MiB, dtype=torch.uint8)
    dst = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda" if cuda else "cpu")

    def copies():
        while not stop.is_set():
            dst.copy_(src)
            if cuda:
                torch.cuda.synchronize()
    th = threading.Thread(target=copies, daemon=True)
    th.start()
    try:
        busy = decoder_s()
    finally:
        stop.set()
        th.join()
    return {"cpu_decoder_alone_s": alone, "cpu_decoder_beside_copies_s": busy, "factor": max(busy / alone, 1.0)}


CPU_ROUNDS = CALIBRATE_ROUNDS  # the CPU grids: the median of this many rounds, pageable and pinned interleaved


def cpu_grids(config: dict, machine, grid: dict, rounds: int) -> list:
    """CPU grids with the weights in pageable and in pinned RAM (a plan's CPU layers read from either), timed in
    `rounds` interleaved rounds (pageable, pinned, pageable, ...) so that both see the same host drift, each point
    the median over the rounds."""
    per: dict[str, list] = {"pageable": [], "pinned": []}
    for _ in range(rounds):
        for memory, got in per.items():
            got.append(measure_grids(config, machine, "cpu", memory=memory, **grid))
    return [g for got in per.values() for g in median_grids(got)]


def _measure(base: str, folder: Path, config: dict, quick: bool, cuda: bool, eager: bool = True,
             peers: tuple[str, ...] = ()) -> dict:
    m = load_machine(base)
    steps = ["storage", "memcpy", "pin", "link", "codec", "roofline", "grid-gpu", "grid-cpu", "contention",
             *(f"peer:{name}" for name in peers)]
    meas: dict = {}
    size = 64 * MiB if quick else 1024 * MiB
    link_sizes = (MiB, 16 * MiB, 128 * MiB) if quick else (MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB)
    gpu_grid = dict(batches=(1, 4), prompts=(8, 32), layers=2, new_tokens=3) if quick else {}
    cpu_grid = dict(batches=(1, 4), prompts=(8, 32), layers=2, new_tokens=3) if quick or not cuda else \
        dict(batches=(1, 4, 16), prompts=(16, 64), layers=3, new_tokens=5,  # 12 decode samples a point: CPU times
             contexts=(1024, 4096))                                             # vary; the cache's cost by length
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


def _host_ram_bytes() -> int:
    """Installed RAM from /proc/meminfo (Linux), else the page count times the page size."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def kept_from_preset(machine: dict, measured: set[str]) -> list[str]:
    """The numeric fields of a profile that calibrate did not measure (they keep the base preset's values)."""
    out = []
    for part in ("gpu", "link", "storage", "host_memory", "cpu"):
        for key, value in machine[part].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and f"{part}.{key}" not in measured:
                out.append(f"{part}.{key}")
    return out


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


def _graph_overhead(grids: list[dict], m, launches: int) -> float | None:
    """Per-kernel overhead inside a CUDA graph: the decoder's graph grid at batch 1 and the shortest context, less
    its bytes at the VRAM bandwidth, over its launches (None without a graph grid)."""
    dec = [g for g in grids if g["device"] == "gpu" and g["dispatch"] == "graph" and g["unit"]["kind"] == "decoder"]
    if not dec or not launches:
        return None
    t = dec[0]["decode_s"][0][0]
    return max(t - dec[0]["unit"]["nbytes"] / m.gpu.vram_bytes_per_s, 0.0) / launches


def _overrides(m, meas: dict, cuda: bool) -> dict:
    """The profile's measured values by field path, from the microbenchmarks (`_measure`)."""
    st, comp = meas["storage"], meas["compute"]
    measured_threads = sorted(int(k.split("_")[1][:-7]) for k in meas["codec"] if k.startswith("decode_"))
    unpack_n = max([t for t in measured_threads if t <= m.cpu.unpack_threads] or measured_threads[:1])
    unpack_total = meas["codec"][f"decode_{unpack_n}threads_bytes_per_s"]
    decode_s = comp["measured"]["layer_b1_s1_s"]
    ideal = comp["layer_nbytes"] / (m.gpu.vram_bytes_per_s if cuda else m.cpu.memory_bytes_per_s)
    overhead = max(decode_s - ideal, 0.0) / comp["layer_launches"]
    over = {"storage.cold_read_bytes_per_s": st["cold_read_bytes_per_s"],
            "storage.cache_read_bytes_per_s": max(st["cache_read_bytes_per_s"], st["cold_read_bytes_per_s"]),
            "storage.write_bytes_per_s": st["write_bytes_per_s"],
            "host_memory.memcpy_bytes_per_s": meas["memcpy_bytes_per_s"],
            "host_memory.first_touch_bytes_per_s": meas["first_touch_bytes_per_s"],
            "host_memory.map_touch_bytes_per_s": st["map_touch_bytes_per_s"],
            "cpu.unpack_bytes_per_s_per_thread": {"zstd": unpack_total / unpack_n},
            "cpu.unpack_threads": unpack_n,
            "gpu.kernel_overhead_s": overhead,
            "gpu.bf16_flops_per_s": max(comp["prefill_flops_per_s"], 1.0)}
    over.update(meas.get("peer_values", {}))  # the engines' costs timed (calibrate --peer), each its package's
    graph = _graph_overhead(meas.get("grids", []), m, comp["layer_launches"]) if cuda else None
    if graph is not None:
        over["gpu.graph_kernel_overhead_s"] = graph
    if cuda:
        link = meas["link"]
        sizes = sorted({int(k.split("_")[1][:-3]) for k in link})
        big = sizes[-1]
        over["link.pinned_h2d_bytes_per_s"] = link[f"pinned_{big}MiB_bytes_per_s"]
        over["link.pageable_h2d_bytes_per_s"] = link[f"pageable_{big}MiB_bytes_per_s"]
        over["link.latency_s"] = 10e-6
        over["link.by_size"] = [{"nbytes": n * MiB, "pinned_bytes_per_s": link[f"pinned_{n}MiB_bytes_per_s"],
                                 "pageable_bytes_per_s": link[f"pageable_{n}MiB_bytes_per_s"]} for n in sizes]
        over["host_memory.pin_bytes_per_s"] = meas["pin_bytes_per_s"]
        if meas.get("contention"):
            over["cpu.copy_contention"] = meas["contention"]["factor"]
    else:  # the CPU is the device: 'VRAM' is this machine's RAM, the 'link' is a host copy (not the base's GPU)
        ram = _host_ram_bytes()
        over.update({"link.pinned_h2d_bytes_per_s": meas["memcpy_bytes_per_s"],
                     "link.pageable_h2d_bytes_per_s": meas["memcpy_bytes_per_s"], "link.latency_s": 0.0,
                     "gpu.name": f"CPU as the device ({platform.processor() or platform.machine()}, no CUDA)",
                     "gpu.vram_bytes": ram, "host_memory.capacity_bytes": ram,
                     "gpu.vram_bytes_per_s": m.cpu.memory_bytes_per_s, "storage.request_latency_s": 0.0,
                     "cpu.cores": os.cpu_count() or 1,
                     "cpu.flops_per_s": over["gpu.bf16_flops_per_s"], "cpu.op_overhead_s": overhead})
    return over


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
