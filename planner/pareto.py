"""Sweeps of the VRAM (and RAM) budget: predicted time per token for the planner and every baseline; plans for a set
of budgets, monotone over the set by construction."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
from tqdm import tqdm

from hwmodels.specs import MachineSpec
from hwmodels.units import GiB
from planner.core import PlanOptions, PlanReport, peer_plans, plan_request, plan_with_report
from sim.costs.memory import min_vram_bytes
from sim.engines import engines
from sim.plan import OS_RESERVE_BYTES, Budgets, Request, Workload
from sim.run.simulate import fast_simulate
from sim.model.shapes import ModelShape


def contains(big: Budgets, small: Budgets) -> bool:
    """`big` has at least `small`'s VRAM, RAM and pinned RAM."""
    return (big.vram_bytes >= small.vram_bytes and big.ram_bytes >= small.ram_bytes
            and big.pinned_bytes >= small.pinned_bytes)


def plan_budgets(model: ModelShape, machine: MachineSpec, w: Workload, budgets: list[Budgets],
                 **kw) -> list[PlanReport]:
    """plan_with_report for every budget (keywords passed on), smallest first, each seeded with the feasible plans
    of the budgets of the list that it contains: a plan for a smaller budget fits a larger one and is no slower
    there, and a seed is never beaten by a slower plan, so for budgets a <= b of the list the plan for b is never
    slower than the plan for a (monotone by construction; `pareto`'s curves, the determinism benchmark)."""
    return plan_requests([Request(model, machine, w, b) for b in budgets], **kw)


def plan_requests(reqs: list[Request], done: Callable[[], None] | None = None, **kw) -> list[PlanReport]:
    """plan_budgets for requests that differ in their budgets only; `done` is called after each plan (progress)."""
    size = [r.budgets.vram_bytes + r.budgets.ram_bytes + r.budgets.pinned_bytes for r in reqs]
    out: dict[int, PlanReport] = {}
    for i in sorted(range(len(reqs)), key=lambda i: (size[i], i)):
        # a budget contained in reqs[i]'s has a smaller sum, or an equal one and is the same budget
        seeds = {f"budget-{j}": r.plan for j, r in out.items()
                 if r.plan.feasible and contains(reqs[i].budgets, reqs[j].budgets)}
        out[i] = plan_request(reqs[i], PlanOptions(seeds=seeds, **kw))
        if done is not None:
            done()
    return [out[i] for i in range(len(reqs))]


def faster_link(big: MachineSpec, small: MachineSpec) -> bool:
    """`big` is `small` with a host-to-device link at least as fast (pinned, pageable, every measured size, no more
    latency per copy)."""
    lb, ls = big.link, small.link
    sizes = len(lb.by_size) == len(ls.by_size) and all(
        p.nbytes == q.nbytes and p.pinned_bytes_per_s >= q.pinned_bytes_per_s
        and p.pageable_bytes_per_s >= q.pageable_bytes_per_s for p, q in zip(lb.by_size, ls.by_size))
    return (sizes and lb.pinned_h2d_bytes_per_s >= ls.pinned_h2d_bytes_per_s
            and lb.pageable_h2d_bytes_per_s >= ls.pageable_h2d_bytes_per_s and lb.latency_s <= ls.latency_s
            and big.model_copy(update={"link": ls, "name": small.name}) == small)


def plan_upgrade(model: ModelShape, small: MachineSpec, big: MachineSpec, w: Workload, budgets: Budgets,
                 **kw) -> tuple[PlanReport, PlanReport]:
    """Plans on a machine and on its variant with a faster link (same budgets), the second seeded with the first:
    the slower link's plan runs on the faster one no slower (more bandwidth never slows the pipeline:
    tests/test_invariants.py), so the faster link's plan is never slower (monotone by construction)."""
    if not faster_link(big, small):
        raise ValueError("plan_upgrade: the second machine must be the first with a link at least as fast")
    a = plan_with_report(model, small, w, budgets, **kw)
    seeds = {"slower-link": a.plan} if a.plan.feasible else None
    return a, plan_with_report(model, big, w, budgets, seeds=seeds, **kw)


def _rows(reqs: list[Request], time_budget_s, done: Callable[[], None] | None = None) -> list[dict]:
    """One row per request: the planner's time per token (planned by plan_requests, so the planner's curve never rises
    with more memory) and every baseline's."""
    rows = []
    for req, rep in zip(reqs, plan_requests(reqs, done, confirm=False, time_budget_s=time_budget_s)):
        row = {"planner": _tpot(req, rep.plan) if rep.plan.feasible else None}
        for name, p in peer_plans(req).items():
            row[name] = None if isinstance(p, str) else _tpot(req, p)
        rows.append(row)
    return rows


def _tpot(req: Request, p) -> float:
    return fast_simulate(req.model, req.machine, p, req.workload, req.budgets)["time_per_token_s"]


def sweep(model: ModelShape, machine: MachineSpec, w: Workload, points: int = 7, ram: int | None = None,
          time_budget_s: float | None = None, progress: bool = False) -> dict:
    """VRAM from the minimum to what fits everything (capped at the GPU), then RAM at the middle VRAM budget;
    `progress`: a bar of the budgets planned on stderr."""
    with tqdm(total=2 * points, desc="pareto (budgets planned)", disable=not progress) as bar:
        return _sweep(model, machine, w, points, ram, time_budget_s, lambda: bar.update(1))


def _sweep(model, machine, w, points, ram, time_budget_s, done) -> dict:
    lo = min_vram_bytes(model, w)
    hi = min(machine.gpu.vram_bytes, int(model.total_bytes * 1.05) + lo)
    vrams = np.linspace(lo, max(hi, lo + 1), points).astype(int).tolist()
    rows = _rows([Request(model, machine, w, Budgets.of(machine, vram=v, ram=ram)) for v in vrams], time_budget_s, done)
    by_vram = [dict(vram_bytes=v, **row) for v, row in zip(vrams, rows)]
    mid = vrams[len(vrams) // 2]
    cap = machine.host_memory.capacity_bytes
    rams = np.linspace(max(cap // 8, 2 * GiB), cap - OS_RESERVE_BYTES, points).astype(int).tolist()
    rows = _rows([Request(model, machine, w, Budgets.of(machine, vram=mid, ram=r)) for r in rams], time_budget_s, done)
    by_ram = [dict(ram_bytes=r, **row) for r, row in zip(rams, rows)]
    # where streaming everything is slower than computing on the CPU with nothing on the GPU
    cpu_only = next((by_vram[0].get(p) for e in engines().values() if e.computes_rest_on_cpu for p in e.policies()),
                    None)
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
