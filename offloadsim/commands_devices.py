"""`offloadsim plan` on a machine with several GPUs, or with `--kv`: the pipeline planner (planner.devices) beside
llama.cpp's layer split and Accelerate's balanced device_map, each with its export and its memory per GPU."""
from __future__ import annotations

import argparse

from hwmodels.units import GiB
from offloadsim.output import emit, fail


def devices_plan_cmd(args: argparse.Namespace, out, model, machine, w, budgets) -> int:
    from planner.devices import compare, plan_devices
    from sim.costs.memory import device_uses
    from sim.plan import KV_HOMES, Request

    req = Request(model, machine, w, budgets)
    homes = KV_HOMES if args.kv in (None, "auto") else (args.kv,)
    plan, s = plan_devices(req, homes)
    if plan is None:
        if args.json:
            emit(args, {"feasible": False, "model": model.name, "machine": machine.name}, "")
        return fail(f"budget: no plan over {machine.gpu_count} GPUs fits these budgets (each GPU's VRAM "
                    f"{budgets.vram_bytes / GiB:.2f} GiB); raise --vram or --ram.")
    if out:
        plan.save(out)
    rows = compare(req)
    uses = device_uses(model, plan, w, budgets)
    data = {"feasible": True, "model": model.name, "machine": machine.name, "gpus": machine.gpu_count,
            "policy": plan.policy, "engine": plan.engine, "kv": plan.kv_home,
            "time_per_token_s": s["time_per_token_s"], "ttft_s": s["ttft_s"], "total_s": s["total_s"],
            "devices": list(plan.devices) if plan.devices else None,
            "vram_per_gpu_bytes": [m.vram_bytes for m in uses],
            "kv_vram_per_gpu_bytes": [m.kv_bytes for m in uses],
            "host_kv_bytes": uses[0].host_kv_bytes + uses[0].pinned_kv_bytes,
            "engines": {r["plan"].policy if r["plan"] else r["engine"]: (
                {"time_per_token_s": r["summary"].get("time_per_token_s"), "ttft_s": r["summary"].get("ttft_s"),
                 "export": r["export"]} if r["plan"] else {"error": r["reason"]}) for r in rows}}
    lines = [f"{model.name} on {machine.name} ({machine.gpu_count} GPU): VRAM {budgets.vram_bytes / GiB:.2f} GiB per "
             f"GPU, RAM {budgets.ram_bytes / GiB:.2f} GiB; batch {w.batch}, prompt {w.prompt_tokens}, "
             f"{w.new_tokens} tokens",
             f"planner: {s['time_per_token_s']:.4f} s per token, first token {s['ttft_s']:.3f} s ({plan.policy}, "
             f"engine {plan.engine}, KV cache in {plan.kv_home})"]
    for g, m in enumerate(uses):
        units = sum(1 for d in (plan.devices or [0] * len(plan.placements)) if d == g)
        lines.append(f"  GPU {g}: {units} units, VRAM {m.vram_bytes / GiB:.2f} GiB (resident "
                     f"{m.resident_vram_bytes / GiB:.2f}, KV cache {m.kv_bytes / GiB:.2f})")
    if data["host_kv_bytes"]:
        lines.append(f"  KV cache in RAM: {data['host_kv_bytes'] / GiB:.2f} GiB")
    lines.append("placements over these GPUs, each predicted:")
    for name, r in data["engines"].items():
        if "error" in r:
            lines.append(f"  {name:<28} cannot run: {r['error'][:120]}")
        else:
            lines.append(f"  {name:<28} {r['time_per_token_s']:.4f} s per token  {r['export']}")
    if args.export:  # the peer's own split over these GPUs, as its arguments
        row = next((r for r in rows if r["engine"] == args.export and r["plan"] is not None and r["export"]), None)
        data["export"] = {"engine": args.export, "arguments": row["export"] if row else None,
                          "reason": "" if row else f"{args.export} has no placement over these GPUs that fits"}
        lines.append(f"{args.export}: {row['export']}" if row else f"{args.export}: {data['export']['reason']}")
    if args.out:
        lines.append(f"plan written to {args.out}")
    return emit(args, data, "\n".join(lines))
