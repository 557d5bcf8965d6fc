"""Plans over several GPUs and with the KV cache placed: offloadsim's own pipeline split, and the peers' own
multi-GPU placements (llama.cpp's layer split, Accelerate's balanced device_map) as baselines with their exports.

The own planner splits the layers into contiguous shares in proportion to each GPU's VRAM budget, and for every
place of the KV cache (sim.plan.KV_HOMES) keeps resident on each GPU as many of its layers as its budget leaves
after the cache it holds there, the activations and its staging slots, spread over its share; the rest stream from
pinned RAM, then pageable RAM, then disk. Each candidate is predicted by the fast evaluator; the fastest wins, so a
KV cache moves to RAM exactly when the weights that its VRAM then holds gain more than its copies cost.
"""
from __future__ import annotations

from hwmodels.topology import attached
from planner.core import plan_request
from planner.judge import PlanOptions
from sim.costs.memory import PlanError, activation_bytes, check_plan, unit_kv_bytes
from sim.engines.accelerate.balanced import balanced_map, balanced_memory, max_memory_arg
from sim.engines import engine_of, own_engine
from sim.engines.common import OFFLOAD_MIN_TOKENS, make_plan
from sim.engines.llamacpp.split import layer_devices, split_args
from sim.plan import KV_HOMES, Plan, Request
from sim.run.fast import Unsupported
from sim.run.simulate import fast_simulate

MAX_MEMORY_SHARES = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5)  # of the VRAM budget, given to Accelerate as max_memory
GOLDEN = 0.6180339887498949  # spreads the resident layers of a share evenly (a low-discrepancy order)


def split_units(req: Request) -> list[int]:
    """Each unit's GPU: contiguous shares of the weights in proportion to the GPUs' VRAM; the embedding on GPU 0."""
    units, n = req.model.units, req.machine.gpu_count
    vram = [a.gpu.vram_bytes for a in attached(req.machine)]
    bounds = [sum(vram[:g + 1]) / sum(vram) for g in range(n)]
    total = sum(u.nbytes for u in units if u.kind != "embedding")
    out, seen = [], 0
    for u in units:
        if u.kind == "embedding":
            out.append(0)
            continue
        mid = (seen + u.nbytes / 2) / total
        out.append(next(g for g in range(n) if mid <= bounds[g] or g == n - 1))
        seen += u.nbytes
    return out


def _residents(req: Request, mine: list[int], kv_home: str, slots: int) -> set[int]:
    """The units of one GPU's share kept resident: evenly spread, while its budget lasts."""
    units, w = req.model.units, req.workload
    kv = unit_kv_bytes(req.model, w)
    held_kv = sum(kv[i] for i in mine) if kv_home == "vram" else 0 if kv_home == "cpu" else \
        2 * max((kv[i] for i in mine), default=0)
    left = req.budgets.vram_bytes - held_kv - activation_bytes(req.model, w)
    if sum(units[i].nbytes for i in mine) <= left:
        return set(mine)
    best: set[int] = set()
    largest = max(mine, key=lambda i: units[i].nbytes, default=None)
    for first in ([], [largest]):  # the largest unit (a head) streamed, or kept so that the slots are smaller
        rest = [i for i in mine if i not in first]
        room = left - slots * max((units[i].nbytes for i in rest), default=0)
        keep = set()
        for j in first + [rest[j] for j in sorted(range(len(rest)), key=lambda j: (j * GOLDEN) % 1.0)]:
            if units[j].nbytes <= room:
                keep.add(j)
                room -= units[j].nbytes
        if sum(units[i].nbytes for i in keep) > sum(units[i].nbytes for i in best):
            best = keep
    return best


def own_plan(req: Request, kv_home: str, slots: int = 3, rest: str = "stream") -> Plan:
    """offloadsim's pipeline over the machine's GPUs with the KV cache at `kv_home`, the layers not resident
    streamed (`rest` 'stream') or computed on the CPU from RAM ('cpu'; copied to the GPU for a step of many
    tokens); raises PlanError when the budgets hold no such plan."""
    model, b = req.model, req.budgets
    devices = split_units(req)
    resident = set()
    for g in range(req.machine.gpu_count):
        resident |= _residents(req, [i for i, d in enumerate(devices) if d == g and
                                     model.units[i].kind != "embedding"], kv_home, slots)
    kv_host = sum(unit_kv_bytes(model, req.workload)) if kv_home != "vram" else 0
    largest = max(u.nbytes for u in model.units)
    pin_left = b.pinned_bytes - 2 * largest - (kv_host if kv_home == "pinned" else 0)
    ram_left = b.ram_bytes - 2 * largest - kv_host
    tiers, compute = {}, {}
    for i, u in enumerate(model.units):
        if i in resident:
            tiers[u.name] = "vram"
        elif u.kind == "embedding" or rest == "cpu" and u.nbytes <= ram_left:  # the embedding's rows looked up in place
            tiers[u.name], compute[u.name], ram_left = "ram_pageable", "cpu", ram_left - u.nbytes
        elif u.nbytes <= min(pin_left, ram_left):
            tiers[u.name], pin_left, ram_left = "ram_pinned", pin_left - u.nbytes, ram_left - u.nbytes
        elif u.nbytes <= ram_left:
            tiers[u.name], ram_left = "ram_pageable", ram_left - u.nbytes
        else:
            tiers[u.name] = "disk_raw"
    kw = dict(devices=tuple(devices) if req.machine.gpu_count > 1 else None, kv=None if kv_home == "vram" else kv_home)
    if rest == "cpu":
        kw["gpu_offload_min_tokens"] = OFFLOAD_MIN_TOKENS
    plan = make_plan(model, req.machine, f"pipeline-{rest}-kv-{kv_home}", tiers, compute,
                     prefetch_depth=min(2, slots), vram_slots=slots, pinned_slots=2, **kw)
    check_plan(model, plan, req.workload, b)
    return plan


def _scored(req: Request, plan: Plan) -> dict | None:
    try:
        return fast_simulate(req.model, req.machine, plan, req.workload, req.budgets)
    except (PlanError, Unsupported):
        return None


def plan_devices(req: Request, kv_homes: tuple[str, ...] = KV_HOMES) -> tuple[Plan | None, dict]:
    """The fastest of the own pipeline plans (every KV place, the rest streamed or on the CPU, three to one staging
    slots) and, on one GPU, the planner's plan by time per token, on several the peers' splits: (plan, its summary) or
    (None, {})."""
    cands = []
    own = [k for k in kv_homes if k in engine_of(own_engine()).kv_homes]
    for kv_home, rest in ((k, r) for k in own for r in ("stream", "cpu")):
        for slots in (3, 2, 1):
            try:
                cands.append(own_plan(req, kv_home, slots, rest))
                break
            except PlanError:
                continue
    if req.machine.gpu_count == 1:
        rep = plan_request(req, PlanOptions(objective="token"))
        if rep.plan.feasible:
            cands.append(rep.plan)
    else:  # the peers' own splits, which a user can deploy as they are
        for make in _peer_splits(kv_homes):
            try:
                cands.append(make(req)[0])
            except PlanError:
                pass
    best, best_s = None, {}
    for p in cands:
        s = _scored(req, p)
        if s is not None and (not best_s or s["time_per_token_s"] < best_s["time_per_token_s"]):
            best, best_s = p, s
    return best, best_s


def _peer_splits(kv_homes: tuple[str, ...]) -> list:
    """The peers' placements over several GPUs for these KV places: llama.cpp's split (and with -nkvo), Accelerate's."""
    out = [llamacpp_split] if "vram" in kv_homes else []
    if "cpu" in kv_homes:
        out.append(lambda req: llamacpp_split(req, "cpu"))
    return out + ([accelerate_balanced] if "vram" in kv_homes else [])


def llamacpp_split(req: Request, kv_home: str = "vram") -> tuple[Plan, str]:
    """llama.cpp with --split-mode layer over the machine's GPUs, -ts their VRAM budgets (its default split: each
    device's free memory) and the largest -ngl whose share fits every GPU; the rest computed on the CPU from the
    mapped file, the embedding there too; with `kv_home` 'cpu', -nkvo (the cache in RAM, attention on the CPU).
    Returns the plan and its arguments; raises PlanError when nothing fits."""
    model, n = req.model, req.machine.gpu_count
    ts = [req.budgets.vram_bytes / 2**30] * n
    n_layer = model.n_blocks
    err = PlanError("vram: not even one layer of llama.cpp's split fits the VRAM budget; raise --vram.")
    for ngl in range(n_layer + 1, 0, -1):
        where = layer_devices(n_layer, ngl, ts)
        tiers, compute, devices = {}, {}, []
        for u in model.units:
            dev = None if u.kind == "embedding" else where[n_layer if u.kind == "lm_head" else u.block]
            tiers[u.name] = "vram" if dev is not None else "ram_pageable"
            if dev is None:
                compute[u.name] = "cpu"
            devices.append(dev or 0)
        nkvo = kv_home == "cpu"
        plan = make_plan(model, req.machine, "llamacpp-split" + ("-nkvo" if nkvo else ""), tiers, compute,
                         prefetch_depth=0, vram_slots=1, pinned_slots=0, pinned_staging=False, engine="llamacpp",
                         gpu_offload_min_tokens=OFFLOAD_MIN_TOKENS, devices=tuple(devices) if n > 1 else None,
                         kv="cpu" if nkvo else None)
        try:
            check_plan(model, plan, req.workload, req.budgets)
            return plan, split_args(ngl, ts) + (" -nkvo" if nkvo else "")
        except PlanError as exc:
            err = exc
    raise err


def accelerate_balanced(req: Request) -> tuple[Plan, str]:
    """Accelerate's device_map="auto" with max_memory = the VRAM budget of each GPU and the RAM budget
    (get_balanced_memory, infer_auto_device_map): offloaded units copied to GPU 0 before each forward. Returns the
    plan and its max_memory argument; raises PlanError when it does not fit."""
    model, n, b = req.model, req.machine.gpu_count, req.budgets
    err = PlanError("vram: Accelerate's balanced map does not fit the VRAM budget; raise --vram.")
    for share in MAX_MEMORY_SHARES:  # Accelerate counts no cache or activations: a user lowers max_memory until it runs
        caps = [int(b.vram_bytes * share)] * n
        where = balanced_map(model, caps, b.ram_bytes)
        tiers = {name: tier for name, (tier, _) in where.items()}
        devices = tuple(where[u.name][1] for u in model.units)
        plan = make_plan(model, req.machine, "accelerate-balanced", tiers, prefetch_depth=0, overlap_copy=False,
                         vram_slots=1, pinned_slots=0, pinned_staging=False, engine="accelerate",
                         devices=devices if n > 1 else None)
        try:
            check_plan(model, plan, req.workload, b)
        except PlanError as exc:
            err = exc
            continue
        return plan, "device_map='auto', max_memory=" + max_memory_arg(balanced_memory(model, caps), b.ram_bytes)
    raise err


def compare(req: Request) -> list[dict]:
    """Every multi-GPU placement of the request, predicted: offloadsim's own best, llama.cpp's split and
    Accelerate's balanced map, each with its time per token, first token and export (or why it does not fit)."""
    rows = []
    plan, s = plan_devices(req)
    rows.append({"engine": plan.engine if plan else "offloadsim", "plan": plan, "summary": s, "export": "",
                 "reason": "" if plan else "no plan fits the budgets"})
    for engine, make in zip(("llamacpp", "llamacpp", "accelerate"), _peer_splits(("vram", "cpu"))):
        try:
            p, export = make(req)
        except PlanError as exc:
            rows.append({"engine": engine, "plan": None, "summary": {}, "export": "", "reason": str(exc)})
            continue
        s = _scored(req, p)
        rows.append({"engine": engine, "plan": p, "summary": s or {}, "export": export,
                     "reason": "" if s else "not predictable"})
    return rows
