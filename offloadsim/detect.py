"""`offloadsim hw detect`: this machine as a profile, without torch.

Measured: installed RAM and cores (psutil, else /proc), the GPU, its VRAM and PCIe link (nvidia-ml-py, else
nvidia-smi), a short disk read (a temporary file written, dropped from the page cache with fadvise, read cold and
re-read warm) and a single-thread memcpy (numpy). Everything else comes from the nearest presets, and says so.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from hwmodels.presets import part_names
from hwmodels.specs import MachineSpec
from offloadsim.machine_flags import base_for_gpu, compose

PROBE_BYTES = 128 * 2**20


def _ram_and_cores() -> tuple[int | None, int | None, str]:
    try:
        import psutil
        return int(psutil.virtual_memory().total), psutil.cpu_count(logical=False) or os.cpu_count(), "psutil"
    except ImportError:
        pass
    try:
        text = Path("/proc/meminfo").read_text()
        kib = int(re.search(r"MemTotal:\s+(\d+) kB", text).group(1))
        return kib * 1024, os.cpu_count(), "/proc/meminfo and os.cpu_count (logical CPUs)"
    except (OSError, AttributeError):
        return None, os.cpu_count(), "os.cpu_count"


def _gpu() -> tuple[dict | None, str]:
    """{'name', 'vram_bytes', 'pcie_generation', 'pcie_lanes'} of GPU 0, or None, and how it was read."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() == 0:
                return None, "nvidia-ml-py found no GPU"
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(h)
            return {"name": name.decode() if isinstance(name, bytes) else name,
                    "vram_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                    "pcie_generation": int(pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)),
                    "pcie_lanes": int(pynvml.nvmlDeviceGetMaxPcieLinkWidth(h))}, "nvidia-ml-py"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001  (absent library, no driver: fall back to nvidia-smi)
        pass
    if shutil.which("nvidia-smi") is None:
        return None, "no nvidia-ml-py and no nvidia-smi"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,pcie.link.gen.max,pcie.link.width.max",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20).stdout
        name, mib, gen, lanes = [x.strip() for x in out.splitlines()[0].split(",")]
        return {"name": name, "vram_bytes": int(float(mib)) * 2**20, "pcie_generation": int(gen),
                "pcie_lanes": int(lanes)}, "nvidia-smi"
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None, "nvidia-smi gave no GPU"


def gpu_preset_for(name: str) -> str | None:
    """The GPU preset a device name matches ('NVIDIA H200' -> 'h200'), longest key first; None when none does."""
    flat = re.sub(r"[^a-z0-9]", "", name.lower())
    keys = sorted(part_names("gpu"), key=len, reverse=True)
    for key in keys:  # every piece of the key in the name: 'a100-80gb' matches 'NVIDIA A100-SXM4-80GB'
        if all(piece in flat for piece in key.split("-")):
            return key
    return None


def disk_speeds(folder: str, nbytes: int = PROBE_BYTES) -> dict[str, float] | None:
    """Write, drop from the page cache, read cold and re-read one temporary file: bytes per second each."""
    block = np.random.default_rng(0).integers(0, 255, size=8 * 2**20, dtype=np.uint8).tobytes()
    try:
        fd, path = tempfile.mkstemp(dir=folder, prefix=".offloadsim-probe-")
    except OSError:
        return None
    try:
        t0 = time.perf_counter()
        with os.fdopen(fd, "wb") as fh:
            for _ in range(nbytes // len(block)):
                fh.write(block)
            fh.flush()
            os.fsync(fh.fileno())
        write = nbytes / (time.perf_counter() - t0)
        speeds = {"write": write}
        for label in ("cold", "cache"):
            with open(path, "rb", buffering=0) as fh:
                if label == "cold":
                    os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                t0 = time.perf_counter()
                while fh.read(8 * 2**20):
                    pass
                speeds[label] = nbytes / (time.perf_counter() - t0)
        return speeds
    except OSError:
        return None
    finally:
        Path(path).unlink(missing_ok=True)


def memcpy_speed(nbytes: int = 256 * 2**20) -> float:
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t0 = time.perf_counter()
    np.copyto(dst, src)
    return nbytes / (time.perf_counter() - t0)


def detect_machine(disk_folder: str = ".", base: str | None = None) -> tuple[MachineSpec, list[str]]:
    """This machine's profile and one line per source of its values; what is not measured comes from `base` (a
    preset or profile; default: the preset suited to the GPU found)."""
    ram, cores, how_ram = _ram_and_cores()
    gpu, how_gpu = _gpu()
    notes, parts = [], {}
    preset = gpu_preset_for(gpu["name"]) if gpu else None
    if gpu and preset:
        parts["gpu"] = preset
        notes.append(f"GPU: {gpu['name']} ({how_gpu}), compute and bandwidth from preset {preset}")
    elif gpu:
        notes.append(f"GPU: {gpu['name']} ({how_gpu}) matches no preset; compute and bandwidth kept from the base")
    else:
        notes.append(f"GPU: none found ({how_gpu}); the GPU is the base machine's preset, not this machine's")
    if gpu:
        parts["link"] = f"pcie{min(max(gpu['pcie_generation'], 3), 6)}x{gpu['pcie_lanes']}"
    base = base or base_for_gpu(parts.get("gpu"))
    m = compose(base, parts, str(ram) if ram else None, base_named=False)
    src = dict(m.sources)
    upd: dict[str, dict] = {"gpu": {}, "cpu": {}, "storage": {}, "host_memory": {}}
    if gpu:
        upd["gpu"]["vram_bytes"] = gpu["vram_bytes"]
        src["gpu.vram_bytes"] = f"[M] {how_gpu} memory total"
        src["link.name"] = f"[M] {how_gpu} max PCIe generation and width"
    if ram:
        src["host_memory.capacity_bytes"] = f"[M] {how_ram}"
    if cores:
        upd["cpu"]["cores"] = cores
        src["cpu.cores"] = f"[M] {how_ram}"
    upd["host_memory"]["memcpy_bytes_per_s"] = memcpy_speed()
    src["host_memory.memcpy_bytes_per_s"] = "[M] hw detect: numpy copy of 256 MiB, one thread"
    disk = disk_speeds(disk_folder)
    if disk:
        upd["storage"].update(cold_read_bytes_per_s=disk["cold"], cache_read_bytes_per_s=disk["cache"],
                              write_bytes_per_s=disk["write"], name=f"disk of {os.path.abspath(disk_folder)}")
        for f, what in (("cold_read", "read after fadvise DONTNEED"), ("cache_read", "re-read"),
                        ("write", "write + fsync")):
            src[f"storage.{f}_bytes_per_s"] = f"[M] hw detect: {PROBE_BYTES >> 20} MiB {what} in {disk_folder}"
        notes.append(f"disk: {PROBE_BYTES >> 20} MiB probe in {disk_folder}: cold {disk['cold'] / 1e9:.2f} GB/s, "
                     f"re-read {disk['cache'] / 1e9:.2f} GB/s")
    else:
        notes.append(f"disk: {disk_folder} could not be probed; speeds kept from the base's preset")
    notes.append(f"RAM {ram / 2**30:.1f} GiB and {cores} cores measured ({how_ram}); RAM bandwidth, CPU FLOP/s, "
                 f"unpack and link speeds are presets (base {base}); run 'offloadsim calibrate' (needs torch) to "
                 "measure them" if ram else "RAM could not be read; kept from the base")
    data = m.model_dump()
    for part, values in upd.items():
        data[part].update(values)
    data.update(name="detected", description=f"this machine, detected ({how_gpu}; base {base})", sources=src)
    return MachineSpec.model_validate(data), notes
