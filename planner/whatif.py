"""What-if capacity planning: a grid of machine variants (storage, VRAM, RAM, link, CPU, GPU, GPU count), each
planned with the quick planner (with several GPUs or contexts varied, the planner that also places the KV cache and
splits layers over GPUs: planner.devices) and predicted with the fast evaluator; single upgrades ranked by gain."""
from __future__ import annotations

import itertools
from concurrent.futures import ProcessPoolExecutor

from tqdm import tqdm

from hwmodels.presets import get_part
from hwmodels.specs import MachineSpec
from hwmodels.topology import with_gpus
from hwmodels.units import GiB, InputError, parse_bytes, parse_link
from planner.devices import plan_devices
from planner.quick import quick_plan
from sim.plan import OS_RESERVE_BYTES, Budgets, Request, Workload
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


_CTX: dict = {}


def _init(model, machine, w) -> None:
    """Worker set-up: the model, machine and workload are sent once, not with every combination."""
    _CTX.update(model=model, machine=machine, w=w)


def _one(combo: dict) -> dict:
    return evaluate(_CTX["model"], _CTX["machine"], _CTX["w"], combo)


def evaluate(model: ModelShape, machine: MachineSpec, w: Workload, combo: dict, placed: bool = False) -> dict:
    """One combination of machine changes (KEYS) planned and predicted: the row whatif and the sweeps report.
    `placed` (a grid over contexts), several GPUs or a GPU count varied: planned by planner.devices, which also
    places the KV cache."""
    m, budget = variant(machine, combo)
    if budget.get("vram", 0) > m.gpu.vram_bytes:  # more VRAM needs a larger GPU: vary gpu= for it
        return {"combo": combo, "feasible": False,
                "reason": f"vram={combo['vram']} exceeds the {m.gpu.name}'s {m.gpu.vram_bytes / GiB:.2f} GiB; "
                          "vary gpu= to get more VRAM"}
    b = Budgets.of(m, vram=budget.get("vram"), ram=budget.get("ram"))
    placed = placed or any(k in combo for k in PLACED) or m.gpu_count > 1
    plan, s = (plan_devices if placed else quick_plan)(Request(model, m, w, b))
    if plan is None:
        return {"combo": combo, "feasible": False}
    return {"combo": combo, "feasible": True, "policy": plan.policy, "ttft_s": s["ttft_s"],
            "time_per_token_s": s["time_per_token_s"], "tokens_per_s": s["tokens_per_s"], "bottleneck": s["bottleneck"]}


ORDERED = ("vram", "ram", "link")  # axes on which more never hurts: a plan for less runs on more, no slower


def _rank(machine: MachineSpec, key: str, value: str) -> float:
    if key in ("vram", "ram"):
        return float(parse_bytes(value, key))
    return variant(machine, {"link": value})[0].link.pinned_h2d_bytes_per_s


def monotone(rows: list[dict], keys: list[str], vary: dict[str, list[str]], machine: MachineSpec) -> None:
    """More VRAM, RAM or a faster link never reads as slower: a combination whose neighbour with less of one ordered
    axis (the rest equal) is faster takes that neighbour's plan, which fits and runs here at most as slow (the same
    budgets or larger, the same copies or faster); its row says so ('plan_from') and keeps the neighbour's time, an
    upper bound here. Rows are visited from the least of every ordered axis up, so a chain carries through."""
    rank = {k: {v: _rank(machine, k, v) for v in vary[k]} for k in keys if k in ORDERED}
    index = {tuple(r["combo"][k] for k in keys): r for r in rows}
    for row in sorted(rows, key=lambda r: [rank[k][r["combo"][k]] if k in rank else 0.0 for k in keys]):
        if not row["feasible"] and "reason" in row:  # a VRAM beyond the GPU: nothing runs there
            continue
        for k, ranks in rank.items():
            below = [v for v in vary[k] if ranks[v] < ranks[row["combo"][k]]]
            if not below:
                continue
            prev = index[tuple((max(below, key=ranks.get) if kk == k else row["combo"][kk]) for kk in keys)]
            if prev["feasible"] and (not row["feasible"] or prev["time_per_token_s"] < row["time_per_token_s"]):
                row.update({key: prev[key] for key in ("feasible", "policy", "ttft_s", "time_per_token_s",
                                                        "tokens_per_s", "bottleneck")})
                row["plan_from"] = prev.get("plan_from", prev["combo"])


def grid(model: ModelShape, machine: MachineSpec, w: Workload, vary: dict[str, list[str]], workers: int = 2,
         progress: bool = True) -> dict:
    keys = list(vary)
    combos = [dict(zip(keys, vals)) for vals in itertools.product(*(vary[k] for k in keys))]
    if workers > 1 and len(combos) > 50:
        with ProcessPoolExecutor(workers, initializer=_init, initargs=(model, machine, w)) as pool:
            rows = list(tqdm(pool.map(_one, combos, chunksize=64), total=len(combos), disable=not progress, desc="what-if"))
    else:
        _init(model, machine, w)
        rows = [_one(c) for c in tqdm(combos, disable=not progress, desc="what-if")]
    return {"model": model.name, "machine": machine.name, **summarize(rows, vary, machine)}


def summarize(rows: list[dict], vary: dict[str, list[str]], machine: MachineSpec) -> dict:
    """Every row of the full grid made monotone (in place), the base (each key's first value) and the single
    upgrades from it ranked by speedup: {'base', 'rows', 'upgrades'}."""
    keys = list(vary)
    monotone(rows, keys, vary, machine)
    base = {k: vary[k][0] for k in keys}
    index = {tuple(r["combo"][k] for k in keys): r for r in rows}
    b = index[tuple(base[k] for k in keys)]
    upgrades = []
    for k in keys:
        for v in vary[k][1:]:
            r = index[tuple((v if kk == k else base[kk]) for kk in keys)]
            if r["feasible"] and b["feasible"]:
                upgrades.append({"change": f"{k}={v}", "time_per_token_s": r["time_per_token_s"],
                                 "speedup": b["time_per_token_s"] / r["time_per_token_s"]})
    upgrades.sort(key=lambda u: -u["speedup"])
    return {"base": base, "rows": rows, "upgrades": upgrades}


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
    fig.savefig(path, dpi=110)
    plt.close(fig)
