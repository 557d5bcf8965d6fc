"""Hardware reports for the CLI: machine listings with sources and the VRAM/host-link gap table."""
from __future__ import annotations

from hwmodels import get_machine, gpu_presets, list_machines, machine_sources
from hwmodels.presets import part_names
from hwmodels.specs import MachineSpec, pcie_theoretical_bytes_per_s


def machines_rows() -> list[dict]:
    rows = []
    for name in list_machines():
        m = get_machine(name)
        rows.append({"name": name, "gpu": m.gpu.name, "vram_bytes": m.gpu.vram_bytes, "link": m.link.name,
                     "pinned_h2d_bytes_per_s": m.link.pinned_h2d_bytes_per_s, "storage": m.storage.name,
                     "ram_bytes": m.host_memory.capacity_bytes, "cpu": m.cpu.name, "description": m.description})
    return rows


def machine_detail(name: str | MachineSpec) -> dict:
    """Every value of a machine (a preset name or a spec) with its source."""
    m = get_machine(name) if isinstance(name, str) else name
    src = machine_sources(name) if isinstance(name, str) else dict(m.sources)
    name = name if isinstance(name, str) else m.name
    flat = []
    for part in ("gpu", "link", "storage", "host_memory", "cpu"):
        for field, value in getattr(m, part).model_dump().items():
            flat.append({"field": f"{part}.{field}", "value": value, "source": src.get(f"{part}.{field}", "")})
    flat.append({"field": "link.theoretical_bytes_per_s", "value": m.link.theoretical_bytes_per_s,
                 "source": "[C] PCIe generation x lanes (specs.pcie_theoretical_bytes_per_s)"})
    if m.topology is not None:  # several GPUs: each GPU's shared uplinks, their speeds, peer-to-peer
        t = m.topology
        flat.append({"field": "topology.gpus", "value": len(t.gpus), "source": src.get("topology.count", "")})
        flat.append({"field": "topology.shares", "value": [list(a.shares) for a in t.gpus],
                     "source": src.get("topology.shares", "")})
        for key, v in t.shared_bytes_per_s.items():
            flat.append({"field": f"topology.shared.{key}", "value": v, "source": src.get(f"topology.shared.{key}", "")})
        flat.append({"field": "topology.p2p_bytes_per_s", "value": t.p2p_bytes_per_s,
                     "source": src.get("topology.p2p_bytes_per_s", "none: GPU-to-GPU copies go through host memory")})
    base = src.get("machine.base")
    return {"name": name, "description": m.description, "values": flat, **({"base": base} if base else {})}


def parts_rows() -> dict[str, list[str]]:
    """Component presets by kind, for the machine flags."""
    return {kind: part_names(kind) for kind in ("gpu", "cpu", "storage", "host_memory", "link")}


def gap_rows() -> list[dict]:
    """VRAM bandwidth over host-link bandwidth per GPU, theoretical and measured where known."""
    rows = []
    for key, g in gpu_presets().items():
        link = pcie_theoretical_bytes_per_s(g.pcie_generation, 16)
        meas = g.measured_h2d_bytes_per_s
        rows.append({"gpu": key, "name": g.name, "year": g.year, "market": g.market, "vram_bytes_per_s": g.vram_bytes_per_s,
                     "pcie_generation": g.pcie_generation, "link_theoretical_bytes_per_s": link,
                     "ratio_theoretical": g.vram_bytes_per_s / link, "measured_h2d_bytes_per_s": meas,
                     "ratio_measured": g.vram_bytes_per_s / meas if meas else None})
    return sorted(rows, key=lambda r: (r["year"], r["vram_bytes_per_s"]))


def format_gap(rows: list[dict]) -> str:
    out = [f"{'year':>4}  {'GPU':<24} {'market':<10} {'VRAM GB/s':>9}  {'PCIe':>4} {'link GB/s':>9} {'x theor':>7}"
           f"  {'H2D GB/s':>8} {'x meas':>6}"]
    for r in rows:
        meas = f"{r['measured_h2d_bytes_per_s'] / 1e9:8.2f} {r['ratio_measured']:6.0f}" if r["ratio_measured"] else f"{'n/a':>8} {'n/a':>6}"
        out.append(f"{r['year']:>4}  {r['name']:<24} {r['market']:<10} {r['vram_bytes_per_s'] / 1e9:9.0f}  "
                   f"{r['pcie_generation']:>4} {r['link_theoretical_bytes_per_s'] / 1e9:9.2f} {r['ratio_theoretical']:7.0f}  {meas}")
    return "\n".join(out)


__all__ = ["machines_rows", "machine_detail", "parts_rows", "gap_rows", "format_gap"]
