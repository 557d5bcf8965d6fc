"""Handler of `offloadsim simulate`."""
from __future__ import annotations

import argparse

from hwmodels.presets import load_machine
from hwmodels.specs import MachineSpec
from hwmodels.units import GiB, check_count
from offloadsim import limits
from offloadsim.output import emit
from offloadsim.outputs import check_distinct, check_output
from offloadsim.resolve import resolve_budgets, resolve_model, resolve_workload
from planner.engines import unmeasured_notes
from sim.analysis.attribution import stall_attribution
from sim.analysis.critical import critical_path, path_breakdown
from sim.costs.tiers import tier_row
from sim.run.events import write_chrome_trace
from sim.analysis.interval import cpu_range
from sim.run.pipeline import rules
from sim.plan import Plan
from sim.engines.placements import get_policy
from sim.run.simulate import simulate


def _fmt(s: dict, plan: Plan, crit: dict, attrib: list[dict], machine: MachineSpec) -> str:
    lines = [f"{plan.model} on {plan.machine}, policy {plan.policy}: prefetch {plan.prefetch_depth}, "
             f"{plan.vram_slots} VRAM slots, copy overlap {'on' if plan.overlap_copy else 'off'}",
             f"time to first token  {s['ttft_s']:10.4f} s",
             f"time per token       {s['time_per_token_s']:10.4f} s   ({s['tokens_per_s']:.3f} tokens/s)",
             f"stall (GPU waiting)  {s['stall_s']:10.4f} s in all, {s['stall_per_token_s']:.4f} s per decode token",
             "stall by cause       " + ", ".join(f"{k} {v:.3f} s" for k, v in sorted(s["stall_by_cause_s"].items(), key=lambda kv: -kv[1])),
             "busy fraction        " + ", ".join(f"{k} {v:.0%}" for k, v in s["busy_fraction"].items()),
             f"memory               VRAM {s['peak_vram_bytes'] / GiB:.2f} GiB, pinned {s['peak_pinned_bytes'] / GiB:.2f} GiB, "
             f"RAM {s['peak_ram_bytes'] / GiB:.2f} GiB, page cache {s['page_cache_bytes'] / GiB:.2f} GiB "
             f"({s['page_cache_hits']} hits, {s['page_cache_misses']} misses)",
             "critical path        " + ", ".join(f"{k} {v:.3f} s" for k, v in sorted(crit.items(), key=lambda kv: -kv[1])),
             f"events               {s['events']}"]
    load = s.get("load")
    if load:
        lines.insert(3, f"load before 1st token{load['total_s']:10.4f} s   (reads {load['read_s']:.3f}, pinning "
                        f"{load['pin_s']:.3f}, copies to VRAM {load['copy_s']:.3f}; not in the time to first token)")
    models = s.get("compute_model") or {}
    used = sorted(k for k, v in models.items() if v == "roofline" and k.split("@")[1] in
                  ({"cpu"} if any(p.compute == "cpu" for p in plan.placements) else set()) | {"gpu"})
    if used:
        lines.append("compute model        roofline (no measured grid for " + ", ".join(used) + " on this machine; "
                     "run 'offloadsim calibrate --model MODEL' on it for measured compute)")
    elif models:
        lines.append("compute model        measured grids (calibrate)")
    rng = s.get("cpu_range")
    if rng:
        lo, hi = rng["time_per_token_s"]
        lines.append(f"CPU repeatability    the CPU grids moved by {rng['spread']:.0%} while calibrate timed them: "
                     f"{lo:.4f}-{hi:.4f} s per token ({rng['coverage']:.0%} of later runs, for the host's drift alone)")
    lines += [f"note: {n}" for n in unmeasured_notes(plan.engine, machine)]
    if attrib:
        lines.append("if resident (time per token saved):")
        lines += [f"  {a['unit']:<44} {a['tier']:<13} {a['gain_s']:8.4f} s" for a in attrib]
    return "\n".join(lines)


def simulate_cmd(args: argparse.Namespace) -> int:
    inputs = (args.plan, args.model, args.machine)
    gantt_out = check_output(args.gantt, "gantt", inputs, (".png", ".svg", ".pdf"), args.force)
    trace_out = check_output(args.trace, "trace", inputs, (".json",), args.force)
    check_distinct({"gantt": gantt_out, "trace": trace_out})
    check_count(args.attribution, "attribution", 0, 256)
    machine = load_machine(args.machine)
    w = resolve_workload(args)
    budgets = resolve_budgets(args, machine)
    model = resolve_model(args)
    limits.check_request(model, machine, w)
    policy = args.policy if args.policy is not None else "stream"
    plan = Plan.load(args.plan) if args.plan is not None else get_policy(policy)(model, machine, w, budgets)
    res = simulate(model, machine, plan, w, budgets)
    res.summary["cpu_range"] = cpu_range(model, machine, plan, w, budgets)
    events = list(res.events)
    pipeline = (res.schedule, rules(res.schedule, plan.prefetch_depth, plan.overlap_copy, plan.vram_slots, plan.pinned_slots))
    path = critical_path(events, plan.prefetch_depth, pipeline)
    crit = path_breakdown(path)
    attrib = []
    if args.attribution and plan.reader_threads == 1:
        # candidates: the units the GPU waited for longest, and the ones the CPU spent longest on
        cost: dict[str, float] = {}
        tiers = plan.tiers()
        for e in events:
            if e.stage == "wait" or (e.stage == "compute" and e.resource == "cpu"):
                cost[e.unit] = cost.get(e.unit, 0.0) + e.duration_s
        units = [u for u in sorted(cost, key=cost.get, reverse=True) if not tier_row(tiers[u].tier).resident][: 3 * args.attribution]
        attrib = [a for a in stall_attribution(model, machine, plan, w, budgets, units=units or None)[: args.attribution]
                  if a["gain_s"] > 0]
    if gantt_out:
        from sim.analysis.plots import gantt
        last = max(0, w.new_tokens - 3)
        gantt(events, str(gantt_out), f"{model.name} on {machine.name}, {plan.policy}, tokens {last}-{w.new_tokens - 1}",
              tokens=(last, w.new_tokens - 1), critical=path)  # written atomically (hwmodels.files.atomic_path)
    if trace_out:
        write_chrome_trace(events, str(trace_out), f"{model.name} {plan.policy}")
    data = dict(res.summary, policy=plan.policy, model=model.name, machine=machine.name, critical_path_s=crit,
                stall_attribution=attrib, notes=unmeasured_notes(plan.engine, machine))
    return emit(args, data, _fmt(res.summary, plan, crit, attrib, machine))
