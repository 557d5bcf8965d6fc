"""Handlers of `offloadsim plan` and `offloadsim pareto`."""
from __future__ import annotations

import argparse
import math

from hwmodels.presets import load_machine

from hwmodels.units import GiB, InputError, check_count
from offloadsim import limits
from offloadsim.output import emit, fail
from offloadsim.outputs import check_output
from offloadsim.resolve import resolve_budgets, resolve_model, resolve_workload
from sim.analysis.attribution import stall_attribution
from sim.costs.memory import shared_bytes
from sim.engines import engine_of, engines as installed, own_engine
from sim.engines.base import RunRef
from offloadsim.plan_text import baseline_lines, deploy_lines, header, planner_lines


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


def _exports(engine: str) -> list[str]:
    """The exports a plan for `engine` can take: the planner's own plans any engine's, another engine only its own."""
    e = engine_of(engine)
    if e.plans_itself:
        return [n for n, x in installed().items() if x.exports]
    return [engine] if e.exports else []


def _check_export(engine: str, export: str | None) -> None:
    """Refuse an export the chosen engine cannot take, before any planning."""
    if export is None or export in _exports(engine):
        return
    chosen, target = engine_of(engine), engine_of(export)
    if not chosen.exports and not chosen.plans_itself:
        raise InputError(f"export: {chosen.label} takes no placement ({chosen.no_export_why}), so "
                         f"--engine {engine} has nothing to export as {export} arguments; drop --export.")
    if not target.exports:
        raise InputError(f"export: {target.label} takes no placement as arguments; export as one of "
                         f"{', '.join(_exports(engine))}.")
    raise InputError(f"export: a plan for --engine {engine} is {chosen.export_form}, not {target.export_form}; use "
                     f"--export {engine}, or plan for that engine with --engine {export} --export {export}.")


OBJECTIVE_KEY = {"request": "request_s", "total": "total_s", "token": "time_per_token_s"}


def _engine_rows(engines: dict, chosen: str, objective: str) -> dict[str, dict]:
    """{engine: {time_per_token_s, ttft_s, request_s, total_s, lower_bound_total_s, speedup} | {error}}; speedup: the
    chosen engine's objective over this engine's (above 1: switching to it is faster); the bound holds for every
    plan of that engine."""
    key = OBJECTIVE_KEY[objective]
    base = engines[chosen].summary.get(key)
    rows = {}
    for name, e in engines.items():
        if e.plan is None:
            rows[name] = {"error": e.reason}
            continue
        t = e.summary.get(key)
        rows[name] = {"time_per_token_s": e.time_per_token_s, "ttft_s": e.summary.get("ttft_s"),
                      "request_s": e.summary.get("request_s"), "total_s": e.summary.get("total_s"),
                      "lower_bound_total_s": e.bound_s, "speedup": base / t if base and t else None}
    return rows


def _placement_summary(model, plan) -> list[dict]:
    """Units and bytes per (tier, compute device), in the order tiers first appear."""
    groups: dict[tuple[str, str], dict] = {}
    for u, p in zip(model.units, plan.placements):
        g = groups.setdefault((p.tier, p.compute), {"tier": p.tier, "compute": p.compute, "units": 0, "nbytes": 0})
        g["units"] += 1
        g["nbytes"] += u.nbytes
    for u, p in zip(model.units, plan.placements):  # a tied head kept beside its embedding is that one matrix
        if u.tied_nbytes:
            groups[(p.tier, p.compute)]["nbytes"] -= shared_bytes(model, plan, p.tier)
            break
    return list(groups.values())


def plan_cmd(args: argparse.Namespace) -> int:
    out = check_output(args.out, "out", (args.model, args.machine), (".json",), args.force)
    if args.time_budget is not None and not (math.isfinite(args.time_budget) and 0 < args.time_budget <= 3600):
        raise InputError(f"time-budget: {args.time_budget!r} seconds is out of range; give a number in (0, 3600].")
    engine = getattr(args, "engine", None) or own_engine()
    _check_export(engine, args.export)
    machine = load_machine(args.machine)
    w = resolve_workload(args)
    budgets = resolve_budgets(args, machine)
    model = resolve_model(args)
    limits.check_request(model, machine, w)
    if machine.gpu_count > 1 or getattr(args, "kv", None):
        from offloadsim.commands_devices import devices_plan_cmd
        return devices_plan_cmd(args, out, model, machine, w, budgets)
    planner_kw = {"objective": args.objective, "time_budget_s": args.time_budget, "progress": True}
    if not engine_of(engine).plans_itself:
        return _engine_plan_cmd(args, engine, out, model, machine, w, budgets, planner_kw)
    from planner.engines import compare_engines, plan_answer
    from planner.export import export_plan
    from sim.plan import Request
    rep, peers = plan_answer(Request(model, machine, w, budgets), args.objective, time_budget_s=args.time_budget,
                             progress=True)
    plan = rep.plan
    if out and plan.feasible:  # an infeasible plan never replaces a file
        plan.save(out)
    s = rep.summary
    data = {"feasible": plan.feasible, "reason": plan.reason, "model": model.name, "machine": machine.name,
            "time_per_token_s": s.get("time_per_token_s"), "ttft_s": s.get("ttft_s"), "total_s": s.get("total_s"),
            "load_s": s.get("load_s"), "request_s": s.get("request_s"), "objective": args.objective,
            "lower_bound_total_s": rep.lower_bound_s, "gap_to_lower_bound": rep.gap, "planning_s": rep.seconds,
            "converged": rep.converged, "stopped": rep.stopped, "evaluations": rep.evaluations,
            "chosen_from": rep.chosen_from,
            "baselines": {k: v.get("time_per_token_s") for k, v in rep.baselines.items()},
            "baselines_request_s": {k: v.get("request_s") for k, v in rep.baselines.items()},
            "baseline_errors": {k: v["error"] for k, v in rep.baselines.items() if "error" in v},
            "prefetch_depth": plan.prefetch_depth, "vram_slots": plan.vram_slots, "pinned_slots": plan.pinned_slots}
    attrib = {}
    if plan.feasible and args.explain and len(model.units) < 2000:
        attrib = {a["unit"]: a["gain_s"] for a in stall_attribution(model, machine, plan, w, budgets, limit=len(model.units))}
    data["layers"] = _placement_rows(model, plan, attrib)
    if args.export and plan.feasible:
        data["export"] = export_plan(args.export, model, plan, w, machine, budgets)
    if not plan.feasible:
        if args.json:
            emit(args, data, "")
        return fail(f"budget: no plan fits: {plan.reason}")
    from planner.engines import EnginePlan
    known = {**peers, engine: EnginePlan(engine, plan, s, bound_s=rep.lower_bound_s)}
    plans = compare_engines(model, machine, w, budgets, known, **planner_kw)
    engines = _engine_rows(plans, engine, args.objective)
    data.update(engine=engine, engines=engines, notes=[])
    base = RunRef(model, args.model, plan, w, machine, budgets, args.out)
    lines = [header(model, machine, budgets, w), *deploy_lines(plans, base), "", *planner_lines(rep, plan, s),
             *baseline_lines(rep.baselines, s["request_s"])]
    return emit(args, data, "\n".join(lines + _tail_lines(args, data)))


def _tail_lines(args, data: dict) -> list[str]:
    """The per-unit table (--explain), the export (--export) and where the plan went (--out)."""
    lines = []
    if args.explain:
        lines.append(f"{'unit':<48} {'kind':<13} {'MB':>9} {'tier':<15} {'on':<4} {'gain if resident':>16}")
        for r, n in _collapse(data["layers"]):
            name = r["unit"] + (f" (x{n})" if n > 1 else "")
            gain = f"{r['stall_gain_s']:.4f} s" if r.get("stall_gain_s") is not None else ""
            lines.append(f"{name[:48]:<48} {r['kind']:<13} {r['nbytes'] / 1e6:9.1f} {r['tier']:<15} {r['compute']:<4} {gain:>16}")
    if "export" in data:
        lines.append(data["export"].get("python") or data["export"]["command"])
        if data["export"].get("requires"):
            lines.append(f"requires: {data['export']['requires']}")
        lines += [f"note: {n}" for n in data["export"]["notes"]]
    if args.out:
        lines.append(f"plan written to {args.out}")
    return lines


def _engine_plan_cmd(args, engine: str, out, model, machine, w, budgets, planner_kw: dict) -> int:
    """`plan --engine E` for a peer engine: E's best plan at the budgets, timed with E's model, and every engine."""
    from planner.engines import compare_engines, plan_for_engine
    from planner.export import export_plan
    chosen = plan_for_engine(engine, model, machine, w, budgets, objective=args.objective)
    plan = chosen.plan
    if plan is None:
        if args.json:
            emit(args, {"feasible": False, "reason": chosen.reason, "engine": engine, "model": model.name,
                        "machine": machine.name}, "")
        return fail(f"budget: {engine} cannot run {model.name} at these budgets: {chosen.reason}")
    if out:
        plan.save(out)
    s = chosen.summary
    plans = compare_engines(model, machine, w, budgets, {engine: chosen}, **planner_kw)
    engines = _engine_rows(plans, engine, args.objective)
    attrib = {}
    if args.explain and len(model.units) < 2000:
        attrib = {a["unit"]: a["gain_s"] for a in stall_attribution(model, machine, plan, w, budgets, limit=len(model.units))}
    placement = _placement_summary(model, plan)
    data = {"feasible": True, "reason": "", "engine": engine, "policy": plan.policy, "model": model.name,
            "machine": machine.name, "time_per_token_s": s.get("time_per_token_s"), "ttft_s": s.get("ttft_s"),
            "total_s": s.get("total_s"), "load_s": s.get("load_s"), "request_s": s.get("request_s"),
            "lower_bound_total_s": chosen.bound_s, "placement": placement, "engines": engines, "notes": list(chosen.notes),
            "prefetch_depth": plan.prefetch_depth, "vram_slots": plan.vram_slots, "pinned_slots": plan.pinned_slots,
            "layers": _placement_rows(model, plan, attrib)}
    if args.export:
        data["export"] = export_plan(args.export, model, plan, w, machine, budgets)
    base = RunRef(model, args.model, plan, w, machine, budgets, args.out)
    lines = [header(model, machine, budgets, w), *deploy_lines(plans, base), "",
             f"{engine_of(engine).label} (--engine {engine}): request {s['request_s']:.3f} s (load {s['load_s']:.3f} s "
             f"+ run {s['total_s']:.3f} s, at least {chosen.bound_s:.3f} s for any plan it runs here); "
             f"{s['time_per_token_s']:.4f} s per token, first token {s['ttft_s']:.3f} s (plan {plan.policy}, the "
             "fastest it can run here)",
             "placement: " + "; ".join(f"{g['units']} units in {g['tier']} computed on the {g['compute'].upper()} "
                                       f"({g['nbytes'] / GiB:.2f} GiB)" for g in placement)]
    lines += [f"note: {n}" for n in chosen.notes]
    return emit(args, data, "\n".join(lines + _tail_lines(args, data)))


def pareto_cmd(args: argparse.Namespace) -> int:
    out = check_output(args.chart, "chart", (args.model, args.machine), (".png", ".svg", ".pdf"), args.force)
    if args.points < 2:
        raise InputError(f"points: {args.points} budgets cannot draw a curve; give --points 2 or more.")
    check_count(args.points, "points", 2, 32, "budgets per sweep")
    machine = load_machine(args.machine)
    w = resolve_workload(args)
    budgets = resolve_budgets(args, machine)  # every budget checked, though the sweep varies VRAM itself
    ram = budgets.ram_bytes if args.ram_budget is not None else None
    model = resolve_model(args)
    limits.check_request(model, machine, w, items=limits.MAX_ITEMS // args.points)
    from planner.pareto import plot, sweep
    data = sweep(model, machine, w, points=args.points, ram=ram, progress=not args.json)
    if out is not None:
        plot(data, out)  # written atomically (hwmodels.files.atomic_path)
    names = [k for k in data["by_vram"][0] if k != "vram_bytes"]
    lines = [f"{'VRAM GiB':>9} " + " ".join(f"{n:>10}" for n in names)]
    for r in data["by_vram"]:
        lines.append(f"{r['vram_bytes'] / GiB:9.2f} " + " ".join(f"{r[n]:10.4f}" if r[n] else f"{'-':>10}" for n in names))
    lines.append(f"figure written to {args.chart}" if out is not None else "(--chart FILE.png draws these curves)")
    return emit(args, data, "\n".join(lines))

