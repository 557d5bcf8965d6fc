"""calibrate's profile assembly: the measured values by field path (overrides), the CUDA graph's per-kernel
overhead, and the fields left at the base preset's values."""
from __future__ import annotations

import os
import platform
from pathlib import Path

from validate.calibrate_host import MiB


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
