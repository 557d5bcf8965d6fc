"""calibrate's host, storage and link microbenchmarks: file reads cold and warm, mapped reads, memcpy, first touch,
pinning, host-to-device copies by size, the codec's decode speed by threads."""
from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from validate.store import CHUNK, _planes, decompress_into, drop_cache

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


def pin_speed(nbytes: int) -> float:
    """Bytes per second of allocating page-locked host memory (a fresh size, so no cached block is reused)."""
    if hasattr(torch._C, "_host_emptyCache"):
        torch._C._host_emptyCache()  # a fresh process pins anew; release blocks cached by earlier steps
    t = time.perf_counter()
    buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dt = time.perf_counter() - t
    del buf
    return nbytes / dt
