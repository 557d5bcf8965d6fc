"""Accelerate's disk offload taken apart, from lab/probes/h200_accel_disk_probe.py's record (lab/journal/peers.md).

Per architecture and round, per decoder module offloaded: what the parameter hooks cost alone ("ram hooked" less
"ram": the same weights in RAM behind `cpu_offload`'s AlignDevicesHook); what `OffloadedWeightsLoader.__getitem__`
took in place against the bare open of the same tensors and calibrate's `offload_open` line; the rest of the disk
map's time over the RAM map's, outside those reads (every hook, the block hooks moving the arguments and the KV cache,
the pages): what `calibrate` measures as `hook_module_s` (validate/hook_cost.py), the median here being the
h200-testbox preset's value; and the disk map less the RAM map against what offloadsim prices without and with it.

    python lab/reports/accel_disk_report.py lab/data/peers/accel-disk.json
"""
from __future__ import annotations

import argparse
import json
import statistics


def per_round(arch: dict) -> list[dict]:
    """One row per round: per-module seconds of each part (decoder modules on disk: the getitem calls a forward)."""
    rows, entries = [], len(arch["bare"])
    bare_open = statistics.median(b["open_s"] for b in arch["bare"] if "layers." in b["tensor"])
    for r in sorted({x["round"] for x in arch["in_place"]}):
        maps = {x["map"]: x for x in arch["in_place"] if x["round"] == r}
        ram, hooked, disk = maps["ram, cpu"], maps["ram hooked, cpu"], maps["disk, cpu"]
        per_fwd = lambda m, ph: m["phases"][ph]["calls"] / m["forwards"]  # noqa: E731
        mods, hooked_mods = per_fwd(disk, "getitem_disk"), per_fwd(hooked, "set_to_device")
        rows.append({"round": r, "modules": mods, "entries": entries, "bare_open_s": bare_open,
                     "hook_s": (hooked["time_per_token_s"] - ram["time_per_token_s"]) / hooked_mods,
                     "rest_s": (disk["time_per_token_s"] - ram["time_per_token_s"]
                                - disk["phases"]["getitem_disk"]["total_s"] / disk["forwards"]) / mods,
                     "getitem_s": disk["phases"]["getitem_disk"]["total_s"] / disk["phases"]["getitem_disk"]["calls"],
                     "disk_less_ram_s": disk["time_per_token_s"] - ram["time_per_token_s"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    a = ap.parse_args()
    d = json.load(open(a.file))
    op = d["offload_open"]
    rows = [(arch["arch"], r) for arch in d["archs"] for r in per_round(arch)]
    hook = statistics.median(r["rest_s"] for _, r in rows)
    print(f"{d['gpu']} host, {d['date'][:10]}; calibrate's offload_open: {op['tensor_s'] * 1e3:.3f} ms a tensor + "
          f"{op['header_entry_s'] * 1e6:.2f} us a header entry")
    print("| arch | round | disk modules | parameter hooks / rest a module | "
          "getitem in place / bare open / offload_open | "
          "disk less RAM a token: measured | priced without the rest | with it (its median, fitted here) |")
    print("|---|---|---|---|---|---|---|---|")
    errs = {"without": [], "with": []}  # the rest priced at its median
    for name, r in rows:
        opened = op["tensor_s"] + op["header_entry_s"] * r["entries"]
        without = r["modules"] * opened
        with_hooks = without + r["modules"] * hook
        errs["without"].append(100 * (without / r["disk_less_ram_s"] - 1))
        errs["with"].append(100 * (with_hooks / r["disk_less_ram_s"] - 1))
        print(f"| {name} | {r['round']} | {r['modules']:.0f} | {r['hook_s'] * 1e3:.3f} / {r['rest_s'] * 1e3:.3f} ms | "
              f"{r['getitem_s'] * 1e3:.3f} / {r['bare_open_s'] * 1e3:.3f} / {opened * 1e3:.3f} ms | "
              f"{r['disk_less_ram_s'] * 1e3:.1f} ms | {without * 1e3:.1f} ms ({errs['without'][-1]:+.1f}%) | "
              f"{with_hooks * 1e3:.1f} ms ({errs['with'][-1]:+.1f}%) |")
    print(f"parameter hooks a module, median of {len(rows)} rounds: "
          f"{statistics.median(r['hook_s'] for _, r in rows):.3e} s; rest (hook_module_s): {hook:.3e} s")
    for k, e in errs.items():
        print(f"disk less RAM priced {k} the rest: median |error| {statistics.median(map(abs, e)):.1f}%, "
              f"worst {max(map(abs, e)):.1f}%")


if __name__ == "__main__":
    main()
