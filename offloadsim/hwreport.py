"""Hardware reports for the CLI: machine listings with sources and the VRAM/host-link gap table."""
from __future__ import annotations

from hwmodels import get_machine, gpu_presets, list_machines, machine_sources
from hwmodels.presets import get_part, part_names
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
    """VRAM bandwidth over host-to-GPU bandwidth per GPU: the datasheet link (the card's own PCIe lanes, or its
    non-PCIe host link) and a published measurement, each in its own column with its source; no measurement, None."""
    rows = []
    for key, g in gpu_presets().items():
        src = get_part("gpu", key)[1]
        lanes = g.pcie_lanes or 16
        if g.host_link:
            link, peak, peak_src = g.host_link, g.host_link_peak_bytes_per_s, src.get("gpu.host_link_peak_bytes_per_s", "")
        else:
            link, peak = f"PCIe {g.pcie_generation}.0 x{lanes}", pcie_theoretical_bytes_per_s(g.pcie_generation, lanes)
            peak_src = f"[C] PCIe {g.pcie_generation}.0 lane rate x {lanes} lanes ({src.get('gpu.pcie_lanes', 'x16 card')})"
        meas = g.measured_h2d_bytes_per_s
        rows.append({"gpu": key, "name": g.name, "year": g.year, "market": g.market, "vram_bytes_per_s": g.vram_bytes_per_s,
                     "link": link, "link_datasheet_bytes_per_s": peak, "ratio_datasheet": g.vram_bytes_per_s / peak,
                     "link_datasheet_source": peak_src, "measured_h2d_bytes_per_s": meas,
                     "ratio_measured": g.vram_bytes_per_s / meas if meas else None,
                     "measured_source": src.get("gpu.measured_h2d_bytes_per_s") if meas else None})
    return sorted(rows, key=lambda r: (r["year"], r["vram_bytes_per_s"]))


def format_gap(rows: list[dict]) -> str:
    out = [f"{'year':>4}  {'GPU':<31} {'market':<10} {'VRAM GB/s':>9}  {'host link':<13} {'datasheet GB/s':>14} "
           f"{'ratio':>5}  {'measured GB/s':>13} {'ratio':>5}"]
    for r in rows:
        meas = f"{r['measured_h2d_bytes_per_s'] / 1e9:13.2f} {r['ratio_measured']:5.0f}" if r["ratio_measured"] else f"{'-':>13} {'-':>5}"
        out.append(f"{r['year']:>4}  {r['name'][:31]:<31} {r['market']:<10} {r['vram_bytes_per_s'] / 1e9:9.0f}  {r['link']:<13} "
                   f"{r['link_datasheet_bytes_per_s'] / 1e9:14.2f} {r['ratio_datasheet']:5.0f}  {meas}")
    out.append("ratio = VRAM bandwidth / host-to-GPU bandwidth per direction. datasheet: the card's own PCIe lanes at the "
               "generation's lane rate, or its non-PCIe link's published peak; measured: a published pinned copy.")
    out.append("sources of the measured and non-PCIe figures:")
    out += [f"  {r['gpu']}: measured {r['measured_source']}" for r in rows if r["measured_source"]]
    out += [f"  {r['gpu']}: datasheet {r['link_datasheet_source']}" for r in rows if not r["link"].startswith("PCIe")
            or "x16" not in r["link"]]
    return "\n".join(out)


__all__ = ["machines_rows", "machine_detail", "parts_rows", "gap_rows", "format_gap"]
