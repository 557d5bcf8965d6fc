"""Sweeps of the VRAM (and RAM) budget: predicted time per token for the planner and every baseline."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from hwmodels.specs import MachineSpec
from hwmodels.units import GiB
from planner.baselines import baseline_plans
from planner.core import plan_with_report
from sim.memory import min_vram_bytes
from sim.plan import OS_RESERVE_BYTES, Budgets, Workload
from sim.policies import POLICIES
from sim.simulate import fast_simulate
from sim.shapes import ModelShape



def _times(model, machine, w, budgets, time_budget_s, previous: list) -> dict:
    """One budget's row; `previous` holds the planner's plan for the last (smaller) budget, which seeds this one so
    the planner's curve never rises with more memory (monotone by construction), and is replaced by this plan."""
    row = {}
    seeds = {"smaller-budget": previous[0]} if previous and previous[0] is not None else None
    rep = plan_with_report(model, machine, w, budgets, confirm=False, time_budget_s=time_budget_s, seeds=seeds)
    row["planner"] = fast_simulate(model, machine, rep.plan, w, budgets)["time_per_token_s"] if rep.plan.feasible else None
    previous[:] = [rep.plan if rep.plan.feasible else None]
    plans = baseline_plans(model, machine, w, budgets)
    try:
        plans["stream"] = POLICIES["stream"](model, machine, w, budgets)
    except Exception as exc:  # noqa: BLE001 - a baseline that cannot run is a gap in its curve
        plans["stream"] = str(exc)
    for name, p in plans.items():
        row[name] = None if isinstance(p, str) else fast_simulate(model, machine, p, w, budgets)["time_per_token_s"]
    return row


def sweep(model: ModelShape, machine: MachineSpec, w: Workload, points: int = 7, ram: int | None = None,
          time_budget_s: float | None = None) -> dict:
    """VRAM from the minimum to what fits everything (capped at the GPU), then RAM at the middle VRAM budget."""
    lo = min_vram_bytes(model, w)
    hi = min(machine.gpu.vram_bytes, int(model.total_bytes * 1.05) + lo)
    vrams = np.linspace(lo, max(hi, lo + 1), points).astype(int).tolist()
    prev: list = []
    by_vram = [dict(vram_bytes=v, **_times(model, machine, w, Budgets.of(machine, vram=v, ram=ram), time_budget_s, prev))
               for v in vrams]
    mid = vrams[len(vrams) // 2]
    cap = machine.host_memory.capacity_bytes
    rams = np.linspace(max(cap // 8, 2 * GiB), cap - OS_RESERVE_BYTES, points).astype(int).tolist()
    prev = []
    by_ram = [dict(ram_bytes=r, **_times(model, machine, w, Budgets.of(machine, vram=mid, ram=r), time_budget_s, prev))
              for r in rams]
    # where streaming everything is slower than computing on the CPU with nothing on the GPU
    cpu_only = by_vram[0].get("llamacpp")
    u_region = [r["vram_bytes"] for r in by_vram if r.get("stream") and cpu_only and r["stream"] > cpu_only]
    return {"model": model.name, "machine": machine.name, "by_vram": by_vram, "by_ram": by_ram, "ram_sweep_vram_bytes": mid,
            "cpu_only_time_per_token_s": cpu_only, "stream_slower_than_cpu_vram_bytes": u_region}


def plot(data: dict, path: str | Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [k for k in data["by_vram"][0] if k not in ("vram_bytes",)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, key, rows in ((axes[0], "vram_bytes", data["by_vram"]), (axes[1], "ram_bytes", data["by_ram"])):
        for name in names:
            xs = [r[key] / GiB for r in rows if r.get(name)]
            ys = [r[name] for r in rows if r.get(name)]
            if xs:
                ax.plot(xs, ys, marker="o", lw=2.5 if name == "planner" else 1.2, label=name,
                        color="black" if name == "planner" else None)
        ax.set_yscale("log")
        ax.set_xlabel(f"{key.split('_')[0].upper()} budget (GiB)")
        ax.set_ylabel("predicted time per token (s)")
        ax.grid(alpha=0.3)
    if data["cpu_only_time_per_token_s"]:
        axes[0].axhline(data["cpu_only_time_per_token_s"], color="grey", ls=":", label="CPU only")
    for v in data["stream_slower_than_cpu_vram_bytes"]:
        axes[0].axvspan(v / GiB - 0.15, v / GiB + 0.15, color="orange", alpha=0.25)
    axes[0].set_title("vs VRAM (orange: streaming slower than CPU only)", fontsize=9)
    axes[1].set_title(f"vs RAM at {data['ram_sweep_vram_bytes'] / GiB:.1f} GiB VRAM", fontsize=9)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{data['model']} on {data['machine']}", fontsize=10)
    fig.tight_layout()
    tmp = Path(path).with_name(f".{Path(path).name}.tmp{Path(path).suffix}")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
