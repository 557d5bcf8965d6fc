"""Handlers of `offloadsim plan` and `offloadsim pareto`."""
from __future__ import annotations

import argparse
import json

from hwmodels.presets import load_machine
from hwmodels.units import InputError
from offloadsim.cli import command, emit
from offloadsim.commands import resolve_model
from offloadsim.commands_sim import resolve_budgets, resolve_workload
from sim.attribution import stall_attribution

GiB = 2**30


def _placement_rows(model, plan, attrib: dict[str, float]) -> list[dict]:
    rows = []
    for u, p in zip(model.units, plan.placements):
        rows.append({"unit": u.name, "kind": u.kind, "nbytes": u.nbytes, "tier": p.tier, "compute": p.compute,
                     "stall_gain_s": attrib.get(u.name)})
    return rows


def _collapse(rows: list[dict]) -> list[tuple[dict, int]]:
    out: list[tuple[dict, int]] = []
    for r in rows:
        if out and r["kind"] == "expert" and out[-1][0]["kind"] == "expert" and out[-1][0]["tier"] == r["tier"] \
                and out[-1][0]["compute"] == r["compute"] and out[-1][0]["unit"].rsplit(".", 1)[0] == r["unit"].rsplit(".", 1)[0]:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((r, 1))
    return out


@command("plan")
def plan_cmd(args: argparse.Namespace) -> int:
    from planner import plan_with_report
    from planner.export import to_accelerate, to_llamacpp
    machine = load_machine(args.machine)
    model = resolve_model(args)
    w = resolve_workload(args)
    budgets = resolve_budgets(args, machine)
    rep = plan_with_report(model, machine, w, budgets, objective=args.objective, time_budget_s=args.time_budget)
    plan = rep.plan
    if args.out:
        plan.save(args.out)
    s = rep.summary
    data = {"feasible": plan.feasible, "reason": plan.reason, "model": model.name, "machine": machine.name,
            "time_per_token_s": s.get("time_per_token_s"), "ttft_s": s.get("ttft_s"), "total_s": s.get("total_s"),
            "lower_bound_total_s": rep.lower_bound_s, "gap_to_lower_bound": rep.gap, "planning_s": rep.seconds,
            "baselines": {k: v.get("time_per_token_s") for k, v in rep.baselines.items()},
            "baseline_errors": {k: v["error"] for k, v in rep.baselines.items() if "error" in v},
            "prefetch_depth": plan.prefetch_depth, "vram_slots": plan.vram_slots, "pinned_slots": plan.pinned_slots}
    attrib = {}
    if plan.feasible and args.explain and len(model.units) < 2000:
        attrib = {a["unit"]: a["gain_s"] for a in stall_attribution(model, machine, plan, w, budgets, limit=len(model.units))}
    data["layers"] = _placement_rows(model, plan, attrib)
    if args.export and plan.feasible:
        data["export"] = to_accelerate(model, plan, w, budgets.vram_bytes, budgets.ram_bytes) if args.export == "accelerate" \
            else to_llamacpp(model, plan)
    if not plan.feasible:
        text = f"infeasible: {plan.reason}"
        emit(args, data, text)
        return 3
    lines = [f"{model.name} on {machine.name}: VRAM {budgets.vram_bytes / GiB:.2f} GiB, RAM {budgets.ram_bytes / GiB:.2f} GiB,"
             f" pinned {budgets.pinned_bytes / GiB:.2f} GiB; batch {w.batch}, prompt {w.prompt_tokens}, {w.new_tokens} tokens",
             f"planner: {s['time_per_token_s']:.4f} s per token, first token {s['ttft_s']:.3f} s "
             f"(prefetch {plan.prefetch_depth}, {plan.vram_slots} VRAM slots, {plan.pinned_slots} pinned slots)",
             f"lower bound on the request {rep.lower_bound_s:.3f} s vs simulated {s['total_s']:.3f} s (gap {rep.gap:.1%}); "
             f"planned in {rep.seconds:.2f} s"]
    for name, v in rep.baselines.items():
        lines.append(f"  {name:<11} " + (f"{v['time_per_token_s']:.4f} s per token  ({v['time_per_token_s'] / s['time_per_token_s']:.2f}x the planner)"
                                         if "time_per_token_s" in v else f"cannot run: {v['error']}"))
    if args.explain:
        lines.append(f"{'unit':<48} {'kind':<13} {'MB':>9} {'tier':<15} {'on':<4} {'gain if resident':>16}")
        for r, n in _collapse(data["layers"]):
            name = r["unit"] + (f" (x{n})" if n > 1 else "")
            gain = f"{r['stall_gain_s']:.4f} s" if r.get("stall_gain_s") is not None else ""
            lines.append(f"{name[:48]:<48} {r['kind']:<13} {r['nbytes'] / 1e6:9.1f} {r['tier']:<15} {r['compute']:<4} {gain:>16}")
    if "export" in data:
        lines.append(json.dumps(data["export"], indent=1) if args.export == "accelerate" else " ".join(data["export"]["args"]))
        lines += [f"note: {n}" for n in data["export"]["notes"]]
    if args.out:
        lines.append(f"plan written to {args.out}")
    return emit(args, data, "\n".join(lines))


@command("pareto")
def pareto_cmd(args: argparse.Namespace) -> int:
    from planner.pareto import plot, sweep
    machine = load_machine(args.machine)
    model = resolve_model(args)
    w = resolve_workload(args)
    if args.points < 2:
        raise InputError(f"points: {args.points} budgets cannot draw a curve; give --points 2 or more.")
    ram = resolve_budgets(args, machine).ram_bytes if args.ram else None
    data = sweep(model, machine, w, points=args.points, ram=ram)
    plot(data, args.out)
    names = [k for k in data["by_vram"][0] if k != "vram_bytes"]
    lines = [f"{'VRAM GiB':>9} " + " ".join(f"{n:>10}" for n in names)]
    for r in data["by_vram"]:
        lines.append(f"{r['vram_bytes'] / GiB:9.2f} " + " ".join(f"{r[n]:10.4f}" if r[n] else f"{'-':>10}" for n in names))
    lines.append(f"figure written to {args.out}")
    return emit(args, data, "\n".join(lines))


@command("whatif")
def whatif_cmd(args: argparse.Namespace) -> int:
    from planner.whatif import grid, parse_vary, plot as plot_whatif
    from sim.plan import Workload
    machine = load_machine(args.machine)
    model = resolve_model(args)
    if not args.vary:
        raise InputError("vary: nothing to vary; give at least one --vary KEY=V1,V2, e.g. --vary storage=nvme-gen4,nvme-gen5.")
    if args.workers < 1:
        raise InputError(f"workers: {args.workers} must be at least 1.")
    vary = parse_vary(args.vary)
    w = Workload(batch=args.batch, prompt_tokens=args.prompt_tokens, new_tokens=args.new_tokens)
    data = grid(model, machine, w, vary, workers=args.workers, progress=not args.json)
    if args.plot:
        plot_whatif(data, args.plot)
    keys = list(vary)
    lines = [" ".join(f"{k:>12}" for k in keys) + f" {'TTFT s':>9} {'s/token':>9} {'tok/s':>8}  critical"]
    for r in sorted(data["rows"], key=lambda r: r.get("time_per_token_s", float("inf")))[:40]:
        if r["feasible"]:
            lines.append(" ".join(f"{r['combo'][k]:>12}" for k in keys) + f" {r['ttft_s']:9.3f} {r['time_per_token_s']:9.4f} "
                         f"{r['tokens_per_s']:8.2f}  {r['bottleneck']} ({r['policy']})")
        else:
            lines.append(" ".join(f"{r['combo'][k]:>12}" for k in keys) + "  infeasible")
    if len(data["rows"]) > 40:
        lines.append(f"... {len(data['rows']) - 40} more (--json for all)")
    lines.append("single upgrades from " + ", ".join(f"{k}={v}" for k, v in data["base"].items()) + ":")
    lines += [f"  {u['change']:<24} {u['speedup']:6.2f}x  ({u['time_per_token_s']:.4f} s/token)" for u in data["upgrades"]]
    return emit(args, data, "\n".join(lines))
