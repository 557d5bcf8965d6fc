"""What-if capacity planning: a grid of machine variants (storage, VRAM, RAM, link, CPU, GPU, GPU count), each
planned by the planner behind `plan` (the same answer for the same combination; with several GPUs or contexts
varied, the planner that also places the KV cache and splits layers over GPUs: planner.devices); single upgrades
ranked by gain."""
from __future__ import annotations

import itertools
import json
from concurrent.futures import ProcessPoolExecutor

from tqdm import tqdm

from hwmodels.files import atomic_path
from hwmodels.presets import get_part
from hwmodels.specs import MachineSpec
from hwmodels.topology import with_gpus
from hwmodels.units import GiB, InputError, parse_bytes, parse_link
from planner.devices import plan_devices
from planner.engines import plan_answer
from sim.plan import OS_RESERVE_BYTES, Budgets, Plan, Request, Workload
from sim.model.shapes import ModelShape

KEYS = ("storage", "vram", "ram", "link", "cpu", "gpu", "gpus")
PLACED = ("gpus",)  # keys whose grids the planner that places the KV cache and splits layers answers


def parse_vary(items: list[str]) -> dict[str, list[str]]:
    """['storage=sata,nvme-gen4', 'vram=8GiB,16GiB'] -> {'storage': [...], 'vram': [...]}, checked."""
    example = {"storage": "sata,nvme-gen4", "vram": "8GiB,16GiB", "ram": "32GiB,64GiB", "link": "pcie3,pcie4",
               "cpu": "laptop-8core,desktop-8core", "gpu": "rtx4090,rtx5090", "gpus": "1,2"}
    out: dict[str, list[str]] = {}
    for item in items:
        key, _, values = item.partition("=")
        key = key.strip()
        if key not in KEYS or not values:
            raise InputError(f"vary: {item!r} is not KEY=v1,v2 with KEY one of {', '.join(KEYS)}; e.g. storage=sata,nvme-gen4.")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not vals:
            raise InputError(f"vary: {item!r} names no value for {key}; give at least one, e.g. {key}={example[key]}.")
        for v in vals:
            _check(key, v)
        out[key] = vals
    return out


def context_tokens(v: str) -> int:
    """A context length: '4096', or '4k' / '128K' (k = 1024 tokens); raises InputError naming the value."""
    text = v.strip().lower()
    scale = 1024 if text.endswith("k") else 1
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit() or not 1 <= int(digits) * scale <= 1 << 20:
        raise InputError(f"context: {v!r} is not a context length; give tokens such as 4096 or 4k (up to 1024k).")
    return int(digits) * scale


def gpus_count(v: str) -> int:
    """A GPU count 1-16; raises InputError naming the value."""
    if not v.strip().isdigit() or not 1 <= int(v) <= 16:
        raise InputError(f"gpus: {v!r} is not a GPU count; give whole numbers from 1 to 16, e.g. gpus=1,2.")
    return int(v)


def _check(key: str, v: str) -> None:
    if key == "gpus":
        gpus_count(v)
    elif key in ("vram", "ram"):
        parse_bytes(v, key)
    elif key == "link":
        gen, lanes = parse_link(v, key)
        get_part("link", f"pcie{gen}x16")
    else:
        get_part({"storage": "storage", "cpu": "cpu", "gpu": "gpu"}[key], v)


def variant(machine: MachineSpec, combo: dict[str, str]) -> tuple[MachineSpec, dict]:
    """The machine with the combo's parts swapped in, and the VRAM/RAM budgets it implies."""
    update, budget = {}, {}
    for key, v in combo.items():
        if key in ("storage", "cpu", "gpu"):
            update[key] = get_part(key, v)[0]
        elif key == "link":  # the generation's x16 preset, its speeds scaled by lanes/16 (pageable: at most that)
            gen, lanes = parse_link(v)
            base = get_part("link", f"pcie{gen}x16")[0]
            pinned = base.pinned_h2d_bytes_per_s * lanes / 16
            update["link"] = base.model_copy(update={"name": f"pcie{gen}x{lanes}", "lanes": lanes,
                                                     "pinned_h2d_bytes_per_s": pinned,
                                                     "pageable_h2d_bytes_per_s": min(base.pageable_h2d_bytes_per_s, pinned)})
        elif key == "ram":
            ram = parse_bytes(v, "ram")
            update["host_memory"] = machine.host_memory.model_copy(update={"capacity_bytes": max(ram, 1)})
            budget["ram"] = max(ram - OS_RESERVE_BYTES, 0)
        elif key == "vram":
            budget["vram"] = parse_bytes(v, "vram")
    m = machine.model_copy(update=update)
    if "gpus" in combo:  # after the parts: N of the (possibly swapped) GPU
        m = with_gpus(m, gpus_count(combo["gpus"]))
    if "gpu" in combo and "vram" not in budget:
        budget["vram"] = m.gpu.vram_bytes
    return m, budget


ORDERED = ("vram", "ram", "link", "storage")  # axes on which more never hurts: a plan for less runs on more, no slower
OBJECTIVE_KEY = {"request": "request_s", "total": "total_s", "token": "time_per_token_s"}
ROW_KEYS = ("ttft_s", "time_per_token_s", "tokens_per_s", "total_s", "load_s", "request_s", "bottleneck")
_CTX: dict = {}


def _init(model, machine, w, objective) -> None:
    """Worker set-up: the model, machine and workload are sent once, not with every combination."""
    _CTX.update(model=model, machine=machine, w=w, objective=objective)


def _request(combo: dict) -> tuple[Request | None, str]:
    """The combination's request, or None and why it cannot be planned (a VRAM beyond the GPU)."""
    model, machine, w = _CTX["model"], _CTX["machine"], _CTX["w"]
    m, budget = variant(machine, combo)
    if budget.get("vram", 0) > m.gpu.vram_bytes:  # more VRAM needs a larger GPU: vary gpu= for it
        return None, (f"vram={combo['vram']} exceeds the {m.gpu.name}'s {m.gpu.vram_bytes / GiB:.2f} GiB; "
                      "vary gpu= to get more VRAM")
    return Request(model, m, w, Budgets.of(m, vram=budget.get("vram"), ram=budget.get("ram"))), ""


def evaluate(model: ModelShape, machine: MachineSpec, w: Workload, combo: dict, placed: bool = False,
             objective: str = "request") -> dict:
    """One combination of machine changes (KEYS) planned as `plan` plans it and predicted: the row whatif and the
    sweeps report (planner/sweep.py). `placed` (a grid over contexts), several GPUs or a GPU count varied: planned by
    planner.devices, which also places the KV cache."""
    _init(model, machine, w, objective)
    return _one(combo, {}, placed)[0]


def _one(combo: dict, floors: dict[str, Plan], placed: bool = False) -> tuple[dict, Plan | None]:
    """A combination planned by `plan`'s planner (planner.engines.plan_answer), judged beside `floors`; with several
    GPUs (or `placed`) by planner.devices."""
    req, why = _request(combo)
    if req is None:
        return {"combo": combo, "feasible": False, "reason": why}, None
    if placed or any(k in combo for k in PLACED) or req.machine.gpu_count > 1:
        plan, s = plan_devices(req)
        if plan is None:
            return {"combo": combo, "feasible": False}, None
        load = s.get("load_s", 0.0)  # the fast evaluator's run, with the load before the first token where it has one
        return {"combo": combo, "feasible": True, "policy": plan.policy, **{k: s[k] for k in ROW_KEYS if k in s},
                "load_s": load, "request_s": s["total_s"] + load}, plan
    rep, _ = plan_answer(req, _CTX["objective"], floors=floors)
    if not rep.plan.feasible:
        return {"combo": combo, "feasible": False}, None
    row = {"combo": combo, "feasible": True, "policy": rep.plan.policy, **{k: rep.summary[k] for k in ROW_KEYS}}
    if rep.chosen_from.startswith("given-floor-"):  # a smaller budget's or slower part's plan, strictly faster here
        row["plan_from"] = rep.chosen_from.removeprefix("given-floor-")
    return row, rep.plan


def _chain(combos: list[dict]) -> list[dict]:
    """Plan `combos` (equal on the unordered axes) from the least up, each judged beside the plans of its neighbours
    with one ordered axis lower: a plan for less fits and runs on more no slower, so along every ordered axis the
    answers never get slower (monotone by construction)."""
    ranks = _CTX["ranks"]
    order = sorted(range(len(combos)), key=lambda i: [ranks[k][combos[i][k]] for k in ranks])
    plans: dict[int, Plan] = {}
    rows: dict[int, dict] = {}
    for i in order:
        c = combos[i]
        floors = {json.dumps(combos[j], sort_keys=True): plans[j] for j in plans
                  if _below(combos[j], c, ranks)}
        rows[i], plan = _one(c, floors)
        if plan is not None:
            plans[i] = plan
    return [rows[i] for i in range(len(combos))]


def _below(a: dict, b: dict, ranks: dict) -> bool:
    """`a` differs from `b` on one ordered axis only, where it has less (a storage: slower in every rate)."""
    diff = [k for k in b if a[k] != b[k]]
    return len(diff) == 1 and diff[0] in ranks and ranks[diff[0]][a[diff[0]]] < ranks[diff[0]][b[diff[0]]] and \
        (diff[0] != "storage" or _slower_storage(a["storage"], b["storage"]))


def _slower_storage(a: str, b: str) -> bool:
    x, y = get_part("storage", a)[0], get_part("storage", b)[0]
    return (x.cold_read_bytes_per_s <= y.cold_read_bytes_per_s and x.cache_read_bytes_per_s <= y.cache_read_bytes_per_s
            and x.request_latency_s >= y.request_latency_s and x.queue_depth <= y.queue_depth)


def _rank(machine: MachineSpec, key: str, value: str) -> float:
    if key in ("vram", "ram"):
        return float(parse_bytes(value, key))
    if key == "storage":
        return get_part("storage", value)[0].cold_read_bytes_per_s
    return variant(machine, {"link": value})[0].link.pinned_h2d_bytes_per_s


def grid(model: ModelShape, machine: MachineSpec, w: Workload, vary: dict[str, list[str]], workers: int = 2,
         progress: bool = True, objective: str = "request") -> dict:
    """Every combination of `vary` planned as `plan` plans it; chains of combinations that differ on ordered axes
    only run in order (monotone), separate chains (other CPUs or GPUs) on `workers` processes."""
    keys = list(vary)
    combos = [dict(zip(keys, vals)) for vals in itertools.product(*(vary[k] for k in keys))]
    ranks = {k: {v: _rank(machine, k, v) for v in vary[k]} for k in keys if k in ORDERED}
    chains: dict[tuple, list[dict]] = {}
    for c in combos:
        chains.setdefault(tuple(c[k] for k in keys if k not in ranks), []).append(c)
    _init(model, machine, w, objective)
    _CTX["ranks"] = ranks
    if workers > 1 and len(chains) > 1:
        with ProcessPoolExecutor(workers, initializer=_init_ranks, initargs=(model, machine, w, objective, ranks)) as pool:
            done = list(tqdm(pool.map(_chain, chains.values()), total=len(chains), disable=not progress,
                             desc="what-if"))
    else:
        done = [_chain(ch) for ch in tqdm(chains.values(), disable=not progress, desc="what-if")]
    by_combo = {json.dumps(r["combo"], sort_keys=True): r for rows in done for r in rows}
    rows = [by_combo[json.dumps(c, sort_keys=True)] for c in combos]
    return {"model": model.name, "machine": machine.name, "objective": objective,
            **summarize(rows, vary, machine, objective)}


def monotone(rows: list[dict], keys: list[str], vary: dict[str, list[str]], machine: MachineSpec,
             objective: str = "request") -> None:
    """For rows planned apart (the sweeps): more VRAM, RAM, a faster link or a faster disk never reads as slower. A
    combination whose neighbour with less of one ordered axis (the rest equal) is faster takes that neighbour's plan,
    which fits and runs here at most as slow; its row says so ('plan_from') and keeps the neighbour's times, an upper
    bound here. Rows are visited from the least of every ordered axis up, so a chain carries through. Rows planned by
    `grid` already are."""
    key = OBJECTIVE_KEY[objective]
    rank = {k: {v: _rank(machine, k, v) for v in vary[k]} for k in keys if k in ORDERED}
    index = {tuple(r["combo"][k] for k in keys): r for r in rows}
    for row in sorted(rows, key=lambda r: [rank[k][r["combo"][k]] if k in rank else 0.0 for k in keys]):
        if not row["feasible"] and "reason" in row:  # a VRAM beyond the GPU: nothing runs there
            continue
        for k, ranks in rank.items():
            below = [v for v in vary[k] if ranks[v] < ranks[row["combo"][k]]
                     and (k != "storage" or _slower_storage(v, row["combo"][k]))]
            if not below:
                continue
            prev = index[tuple((max(below, key=ranks.get) if kk == k else row["combo"][kk]) for kk in keys)]
            if prev["feasible"] and (not row["feasible"] or prev[key] < row[key]):
                row.update({name: prev[name] for name in ("feasible", "policy", *ROW_KEYS)})
                row["plan_from"] = prev.get("plan_from", prev["combo"])


def summarize(rows: list[dict], vary: dict[str, list[str]], machine: MachineSpec, objective: str = "request") -> dict:
    """Every row of the full grid made monotone (in place), the base (each key's first value) and the single
    upgrades from it ranked by speedup on the objective: {'base', 'rows', 'upgrades'}."""
    keys = list(vary)
    monotone(rows, keys, vary, machine, objective)
    return {"base": {k: vary[k][0] for k in keys}, "rows": rows, "upgrades": _upgrades(rows, keys, vary, objective)}


def _init_ranks(model, machine, w, objective, ranks) -> None:
    _init(model, machine, w, objective)
    _CTX["ranks"] = ranks


def _upgrades(rows: list[dict], keys: list[str], vary: dict[str, list[str]], objective: str) -> list[dict]:
    """Each single change from the base (every key's first value), ranked by its speedup on the objective."""
    key = OBJECTIVE_KEY[objective]
    base = {k: vary[k][0] for k in keys}
    index = {tuple(r["combo"][k] for k in keys): r for r in rows}
    b = index[tuple(base[k] for k in keys)]
    upgrades = []
    for k in keys:
        for v in vary[k][1:]:
            r = index[tuple((v if kk == k else base[kk]) for kk in keys)]
            if r["feasible"] and b["feasible"]:
                upgrades.append({"change": f"{k}={v}", "time_per_token_s": r["time_per_token_s"],
                                 "request_s": r["request_s"], "speedup": b[key] / r[key]})
    upgrades.sort(key=lambda u: -u["speedup"])
    return upgrades


def plot(data: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ups = data["upgrades"][:15]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(ups) + 1.2))
    ax.barh([u["change"] for u in ups][::-1], [u["speedup"] for u in ups][::-1], color="#1f77b4")
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xlabel("speedup of the time per token over the base machine")
    ax.set_title(f"{data['model']} on {data['machine']}: single upgrades", fontsize=9)
    fig.tight_layout()
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
