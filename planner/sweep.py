"""Sweeps: the what-if grid over machine parts, models, context lengths and batch sizes, enumerated lazily by index and
mapped chunk by chunk over a backend (this process, or a Dask cluster: planner/sweep_dask.py).

Each combination is planned and predicted by `planner.whatif.evaluate`, the per-combination entry point of `whatif`,
so a sweep's answer for a combination is whatif's answer for it.
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from hwmodels.specs import MachineSpec
from hwmodels.units import InputError
from planner.whatif import KEYS as MACHINE_KEYS
from planner.whatif import context_tokens, evaluate as evaluate_machine
from planner.whatif import summarize
from sim.costs.memory import PlanError
from sim.model.shapes import ModelShape
from sim.plan import Workload

WORKLOAD_KEYS = ("model", "context", "batch")  # context: prompt tokens
KEYS = (*MACHINE_KEYS, *WORKLOAD_KEYS)
CHUNK = 32  # combinations per task: a task of about a second keeps a cluster's overhead small
TOP = 40


@dataclass(frozen=True)
class Sweep:
    """What a sweep varies (`vary`, each key's values in order; the first values are the base) and what it holds
    fixed: the machine, the workload, and the models by the name `vary['model']` gives them (or the one model)."""
    models: dict[str, ModelShape]
    machine: MachineSpec
    workload: Workload
    vary: dict[str, list[str]]

    def __post_init__(self):
        unknown = [k for k in self.vary if k not in KEYS]
        if unknown or not self.vary or any(not v for v in self.vary.values()):
            raise InputError(f"vary: {unknown or list(self.vary)} is not a grid over {', '.join(KEYS)}; give each "
                             "key with at least one value.")
        if "model" not in self.vary and len(self.models) != 1:
            raise InputError("model: a sweep without --vary model=... plans one model; give exactly one.")
        missing = [m for m in self.vary.get("model", []) if m not in self.models]
        if missing:
            raise InputError(f"model: {missing[0]!r} is varied but not loaded; load every model the grid names.")

    @property
    def size(self) -> int:
        return math.prod(len(v) for v in self.vary.values())


def combo_at(vary: dict[str, list[str]], i: int) -> dict[str, str]:
    """The i-th combination in itertools.product order (the last key varies fastest)."""
    out = {}
    for k in reversed(list(vary)):
        i, r = divmod(i, len(vary[k]))
        out[k] = vary[k][r]
    return {k: out[k] for k in vary}


def index_of(vary: dict[str, list[str]], combo: dict[str, str]) -> int | None:
    """The position of a combination in the grid, or None when one of its values is not in it."""
    if set(combo) != set(vary):
        return None
    i = 0
    for k, values in vary.items():
        if combo[k] not in values:
            return None
        i = i * len(values) + values.index(combo[k])
    return i


def evaluate(sweep: Sweep, combo: dict[str, str]) -> dict:
    """One combination's row: whatif's planner and fast evaluator on the machine, model and workload it names."""
    model = sweep.models[combo["model"]] if "model" in combo else next(iter(sweep.models.values()))
    update = {"prompt_tokens": context_tokens(combo["context"])} if "context" in combo else {}
    if "batch" in combo:
        update["batch"] = int(combo["batch"])
    w = sweep.workload.model_copy(update=update)
    try:
        row = evaluate_machine(model, sweep.machine, w, {k: v for k, v in combo.items() if k in MACHINE_KEYS},
                               "context" in combo)  # over contexts the KV cache is placed too
    except (InputError, PlanError) as exc:  # one combination that cannot run is a row, not the sweep's end
        row = {"feasible": False, "reason": str(exc)}
    return {**row, "combo": combo}


def evaluate_chunk(sweep: Sweep, indices: list[int]) -> list[dict]:
    """The rows of a chunk of combinations, by index: the task a backend runs."""
    return [evaluate(sweep, combo_at(sweep.vary, i)) for i in indices]


def chunks(indices: Iterable[int], size: int = CHUNK) -> Iterator[list[int]]:
    it = iter(indices)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def in_process(sweep: Sweep, todo: Iterable[list[int]]) -> Iterator[list[dict]]:
    """The serial backend: each chunk evaluated here, in order."""
    for chunk in todo:
        yield evaluate_chunk(sweep, chunk)


Backend = Callable[[Sweep, Iterable[list[int]]], Iterator[list[dict]]]


def run(sweep: Sweep, backend: Backend = in_process, skip: Callable[[int], bool] = lambda i: False,
        ) -> Iterator[list[dict]]:
    """Every combination not skipped, evaluated by the backend in chunks; yields each chunk's rows as it completes
    (a cluster's chunks arrive in any order)."""
    return backend(sweep, chunks(i for i in range(sweep.size) if not skip(i)))


def summary(sweep: Sweep, rows: Iterable[dict], keep_all: bool) -> dict:
    """What whatif prints from a sweep's rows (any order, each combination once). keep_all: every row, made
    monotone (more VRAM, RAM or link never slower; planner.whatif.monotone), in grid order, with the single upgrades
    from the base; otherwise, for grids too large to hold, the TOP fastest rows and the single upgrades, each row
    its own combination's answer."""
    vary = sweep.vary
    if keep_all:
        ordered = sorted(rows, key=lambda r: index_of(vary, r["combo"]))
        return summarize(ordered, vary, sweep.machine)
    base = {k: vary[k][0] for k in vary}
    near: dict[str, dict] = {}  # the base and the rows one key away from it

    def feasible(rows):
        for r in rows:
            off = [k for k in vary if r["combo"][k] != base[k]]
            if len(off) <= 1:
                near["" if not off else f"{off[0]}={r['combo'][off[0]]}"] = r
            if r["feasible"]:
                yield r
    top = heapq.nsmallest(TOP, feasible(rows), key=lambda r: r["time_per_token_s"])
    b = near.get("")
    upgrades = [{"change": c, "time_per_token_s": r["time_per_token_s"],
                 "speedup": b["time_per_token_s"] / r["time_per_token_s"]}
                for c, r in near.items() if c and b and b["feasible"] and r["feasible"]]
    upgrades.sort(key=lambda u: (-u["speedup"], index_of(vary, {**base, **dict([u["change"].split("=", 1)])})))
    return {"base": base, "rows": top, "upgrades": upgrades, "each_row_its_own_plan": True}
