"""`offloadsim info`: eq. (1) per unit and tier, cold and warm, and the eq. (2) verdict."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.costs.equations import TIERS, Codec, compression_pays, t_prep
from sim.costs.memory import PlanError
from sim.plan import Budgets, Workload
from sim.engines.common import fit_slots, make_plan
from sim.model.shapes import ModelShape
from sim.run.simulate import fast_simulate



def _streamed_tpot(model: ModelShape, machine: MachineSpec, codec: Codec, tier: str, warm: bool) -> float:
    """Decode time per token with every unit streamed from `tier` (prefetch 2, overlap, pinned staging).

    Cold: RAM holds only the staging buffers, so every read comes from the device; warm: the page cache holds it all.
    """
    biggest = max(u.nbytes for u in model.units)
    w = Workload(batch=1, prompt_tokens=16, new_tokens=3, warm=warm)
    ram = Budgets.unlimited().ram_bytes if warm else 3 * biggest
    budgets = Budgets(vram_bytes=machine.gpu.vram_bytes, ram_bytes=ram, pinned_bytes=3 * biggest)
    plan = make_plan(model, machine, "stream-" + tier, {u.name: tier for u in model.units}, prefetch_depth=2,
                     overlap_copy=True, vram_slots=3, pinned_slots=3, codec=codec)
    plan = fit_slots(model, plan, w, budgets, 3)
    return fast_simulate(model, machine, plan, w, budgets)["time_per_token_s"]


def compression_verdict(model: ModelShape, machine: MachineSpec, codec: Codec, layers: list[dict],
                        stages: dict[str, dict[str, dict[str, float]]]) -> dict:
    """Does streaming compressed weights from disk shorten the time per token? Two answers, both reported:
    eq. (2)'s serial view (each weight read, unpacked and copied one stage after another: the sum of eq. (1) over the
    weights) and the pipelined timeline (the stages overlap across weights, so a token costs about its slowest
    stage's total). stages: {'cold'|'warm': {'disk_raw'|'disk_compressed': {'read_s', 'unpack_s', 'copy_s'}}}."""
    out: dict = {"eq2_units_paying": sum(layer["compression_pays"] for layer in layers),
                 "eq2_units_paying_warm": sum(layer["compression_pays_warm"] for layer in layers), "units": len(layers)}
    for case, warm in (("cold", False), ("warm", True)):
        st = stages[case]
        serial = {t: sum(st[t].values()) for t in st}
        out_case = {"serial_raw_s": serial["disk_raw"], "serial_compressed_s": serial["disk_compressed"],
                    "serial_speedup": serial["disk_raw"] / serial["disk_compressed"],
                    "stages_raw_s": st["disk_raw"], "stages_compressed_s": st["disk_compressed"]}
        try:
            raw = _streamed_tpot(model, machine, codec, "disk_raw", warm)
            packed = _streamed_tpot(model, machine, codec, "disk_compressed", warm)
        except PlanError as exc:
            out[case] = {**out_case, "error": str(exc)}
            continue
        out[case] = {"raw_time_per_token_s": raw, "compressed_time_per_token_s": packed, "speedup": raw / packed,
                     "pays": packed < raw, **out_case}
    return out


def _slowest(stages: dict[str, float]) -> str:
    name = max(stages, key=stages.get)
    return f"{name.removesuffix('_s')} {stages[name]:.2f} s"


def _verdict_text(v: dict) -> str:
    lines = []
    for case in ("cold", "warm"):
        c = v[case]
        eq2 = v["eq2_units_paying" if case == "cold" else "eq2_units_paying_warm"]
        lines.append(f"compression, {case}, every unit streamed from disk, seconds a token raw vs compressed:")
        lines.append(f"  eq. (2), serial (sum of eq. (1): read + unpack + copy, weight after weight): "
                     f"{c['serial_raw_s']:.3f} vs {c['serial_compressed_s']:.3f} ({c['serial_speedup']:.2f}x, "
                     f"{'pays' if c['serial_speedup'] > 1 else 'does not pay'}; it pays for {eq2} of {v['units']} units)")
        if "error" in c:
            lines.append(f"  pipelined timeline: cannot stream this model ({c['error']})")
            continue
        lines.append(f"  pipelined timeline (the stages overlap): {c['raw_time_per_token_s']:.3f} vs "
                     f"{c['compressed_time_per_token_s']:.3f} ({c['speedup']:.2f}x, "
                     f"{'PAYS' if c['pays'] else 'does not pay'}): act on this one")
        if c["pays"] != (c["serial_speedup"] > 1):
            lines.append(f"  they differ because the pipeline unpacks one weight while the next is read and copied, so a"
                         f" token costs about its slowest stage (raw: {_slowest(c['stages_raw_s'])}; compressed: "
                         f"{_slowest(c['stages_compressed_s'])}), not the sum of the stages")
    return "\n".join(lines)


def info(model: ModelShape, machine: MachineSpec, codec: Codec) -> dict:
    layers = []
    totals = {t: 0.0 for t in TIERS}
    totals_warm = {t: 0.0 for t in TIERS}
    stages = {case: {t: {"read_s": 0.0, "unpack_s": 0.0, "copy_s": 0.0} for t in ("disk_raw", "disk_compressed")}
              for case in ("cold", "warm")}
    for u in model.units:
        cold = {t: t_prep(u.nbytes, t, machine, warm=False, codec=codec) for t in TIERS}
        warm = {t: t_prep(u.nbytes, t, machine, warm=True, codec=codec) for t in TIERS}
        for case, preps in (("cold", cold), ("warm", warm)):
            for t, acc in stages[case].items():
                for k in acc:
                    acc[k] += getattr(preps[t], k)
        raw_read = cold["disk_raw"].read_s
        layers.append({
            "name": u.name, "kind": u.kind, "block": u.block, "nbytes": u.nbytes, "params": u.params,
            "t_prep_s": {t: p.total_s for t, p in cold.items()},
            "t_prep_warm_s": {t: p.total_s for t, p in warm.items()},
            "read_cold_s": raw_read, "read_warm_s": warm["disk_raw"].read_s, "copy_s": cold["ram_pinned"].copy_s,
            "unpack_s": cold["disk_compressed"].unpack_s,
            "compression_pays": compression_pays(u.nbytes, u.nbytes * codec.ratio, machine.storage.cold_read_bytes_per_s,
                                                 cold["disk_compressed"].unpack_s),
            "compression_pays_warm": compression_pays(u.nbytes, u.nbytes * codec.ratio,
                                                      machine.storage.cache_read_bytes_per_s, warm["disk_compressed"].unpack_s),
        })
        for t in TIERS:
            totals[t] += cold[t].total_s
            totals_warm[t] += warm[t].total_s
    total = model.total_bytes
    return {
        "model": model.name, "machine": machine.name, "weight_format": model.weight_format.name,
        "total_params": model.total_params, "total_bytes": total, "units": len(model.units),
        "codec": codec.model_dump(),
        "total_t_prep_s": totals, "total_t_prep_warm_s": totals_warm,
        "total_read_cold_s": sum(layer["read_cold_s"] for layer in layers),
        "total_copy_s": sum(layer["copy_s"] for layer in layers),
        "total_copy_theoretical_s": total / machine.link.theoretical_bytes_per_s,
        "layers": layers,
        "compression_verdict": compression_verdict(model, machine, codec, layers, stages),
    }


def _collapse(layers: list[dict]) -> list[tuple[dict, int]]:
    """Consecutive units of one kind, block and size print as one row with a count."""
    rows: list[tuple[dict, int]] = []
    for layer in layers:
        if rows and rows[-1][0]["kind"] == layer["kind"] == "expert" and rows[-1][0]["block"] == layer["block"] \
                and rows[-1][0]["nbytes"] == layer["nbytes"]:
            rows[-1] = (rows[-1][0], rows[-1][1] + 1)
        else:
            rows.append((layer, 1))
    return rows


def format_info(rep: dict) -> str:
    cols = ["ram_pinned", "ram_pageable", "ram_compressed", "disk_raw", "disk_compressed"]
    head = (f"{rep['model']} ({rep['weight_format']}, {rep['total_params'] / 1e9:.3f} B params, "
            f"{rep['total_bytes'] / 1e9:.2f} GB) on {rep['machine']}; codec {rep['codec']['name']} ratio "
            f"{rep['codec']['ratio']:.2f} at {rep['codec']['unpack_bytes_per_s'] / 1e9:.2f} GB/s\n"
            "eq. (1) seconds until ready in VRAM, per unit; disk tiers cold / warm (page cache)\n")
    lines = [f"{'unit':<52} {'kind':<13} {'MB':>9} " + " ".join(f"{c:>13}" for c in cols[:3])
             + f" {'disk_raw c/w':>17} {'disk_cmp c/w':>17} {'eq2 c/w':>8}"]
    for layer, n in _collapse(rep["layers"]):
        name = layer["name"] + (f" (x{n})" if n > 1 else "")
        tp, tw = layer["t_prep_s"], layer["t_prep_warm_s"]
        verdict = ("yes" if layer["compression_pays"] else "no") + "/" + ("yes" if layer["compression_pays_warm"] else "no")
        lines.append(f"{name[:52]:<52} {layer['kind']:<13} {layer['nbytes'] / 1e6:9.1f} "
                     + " ".join(f"{tp[c]:13.4f}" for c in cols[:3])
                     + f" {tp['disk_raw']:8.4f}/{tw['disk_raw']:8.4f} {tp['disk_compressed']:8.4f}/{tw['disk_compressed']:8.4f}"
                     f" {verdict:>8}")
    t, tw = rep["total_t_prep_s"], rep["total_t_prep_warm_s"]
    lines.append(f"{'TOTAL':<52} {'':<13} {rep['total_bytes'] / 1e6:9.1f} " + " ".join(f"{t[c]:13.3f}" for c in cols[:3])
                 + f" {t['disk_raw']:8.3f}/{tw['disk_raw']:8.3f} {t['disk_compressed']:8.3f}/{tw['disk_compressed']:8.3f}")
    lines.append(f"whole model: read from disk cold {rep['total_read_cold_s']:.2f} s; copy over the link "
                 f"{rep['total_copy_s']:.2f} s at the achieved pinned rate, {rep['total_copy_theoretical_s']:.2f} s at "
                 "the theoretical rate")
    lines.append(_verdict_text(rep["compression_verdict"]))
    return head + "\n".join(lines)
