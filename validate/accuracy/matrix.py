"""offloadsim's own engine: the validation matrix's runs (lab/campaigns/h200_matrix.py) re-predicted.

Each run recorded its calibrated profile, the model's shape, the plan, the workload and the budgets; the prediction
is today's SimPy timeline of that plan on that profile. A run whose executed items (each step's copies and computes)
differ from what today's schedule of its plan gives ran a schedule of the code of its day: it is not re-predicted and
is counted apart (`Matrix.not_regenerated`). No cost is fitted on any run: every run is held out.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim.costs.memory import memory_use
from sim.engines import own_engine
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload
from sim.run.simulate import simulate
from validate.accuracy.peers import profile_machine
from validate.accuracy.records import Row, call_date, read_call

GPU = "offloadsim's engine, GPU-side plans"
CPU = "offloadsim's engine, plans with CPU-computed layers"
PLANNER = "offloadsim's engine, the planner's own choices"
# a plan's class, from its label in the matrix (the first key found in the label names it)
CLASSES = (("planner", "planner"), ("CPU", "CPU layers"), ("llamacpp", "llama.cpp's placement"),
           ("compressed", "compressed (RAM, disk)"), ("disk raw", "disk, raw"), ("pageable", "pageable RAM"),
           ("pinned budget", "pinned budget below the streamed set"), ("pinned", "pinned RAM"),
           ("resident", "resident"))


def plan_class(label: str) -> str:
    """The class of a matrix plan from its label (CLASSES); 'other' where none matches."""
    return next((name for key, name in CLASSES if key in label), "other")


def family_of(run: dict) -> str:
    if "planner" in run["label"]:
        return PLANNER
    return GPU if run["gpu_only"] else CPU


def run_inputs(entry: dict, run: dict) -> tuple:
    """(shape, machine, plan, workload, budgets) of a recorded run, the plan priced as offloadsim's engine (the engine
    that ran it), the budgets widened to the VRAM that engine needed for the plan (a plan of the memory model of its
    day that today's refuses ran with what it took)."""
    machine = profile_machine(entry["profile"]["machine"])
    shape = ModelShape.model_validate(entry["shape"])
    plan, budgets = Plan.model_validate(run["plan"]), Budgets.model_validate(run["budgets"])
    w = Workload.model_validate(run["workload"]).model_copy(update={"warm": not run["cold"]})
    # every matrix run executed on offloadsim's engine: a llama.cpp-like placement recorded with engine 'llamacpp' too
    ran = plan.model_copy(update={"engine": own_engine()})
    room = max(budgets.vram_bytes, memory_use(shape, ran, w, budgets).vram_bytes,
               memory_use(shape, plan, w, budgets).vram_bytes)
    return shape, machine, ran, w, budgets.model_copy(update={"vram_bytes": room})


def executed(events) -> set[tuple]:
    """(step, unit, stage) of every copy and compute: the structure of a run, predicted or measured (events as
    [step, unit, stage, ...])."""
    return {(e[0], e[1], e[2]) for e in events if e[2] in ("copy", "compute")}


def repredict(entry: dict, run: dict, file: str, date: str) -> Row | None:
    """The run re-predicted, or None where today's schedule of its plan is not what it executed."""
    shape, machine, plan, w, room = run_inputs(entry, run)
    sim = simulate(shape, machine, plan, w, room)
    if executed([[e.token, e.unit, e.stage] for e in sim.events]) != executed(run["measured_events"]):
        return None
    label = run["label"].replace(" (repeat)", "")
    meas = run["measured"]
    return Row(family=family_of(run), slice=plan_class(run["label"]), file=file, date=date, arch=entry["arch"],
               label=run["label"], tpot_pred_s=sim.summary["time_per_token_s"], tpot_meas_s=meas["time_per_token_s"],
               ttft_pred_s=sim.summary["ttft_s"], ttft_meas_s=meas["ttft_s"], held_out=True,
               setting=(file, entry["arch"], shape.n_blocks, label, run["batch"], run["prompt"]))


@dataclass(frozen=True)
class Matrix:
    rows: tuple[Row, ...]
    not_regenerated: tuple[str, ...]  # 'FILE ARCH LABEL' of the runs whose schedule of the day differs from today's


def read_matrix(paths: list[Path]) -> Matrix:
    """Every measured run of the matrix files, re-predicted (architectures that failed in their call left out)."""
    rows, skipped = [], []
    for path in paths:
        doc = read_call(path)
        for entry in doc["archs"]:
            if "error" in entry:
                continue
            for run in entry["runs"]:
                if "measured" not in run:
                    continue
                row = repredict(entry, run, Path(path).name, call_date(doc))
                if row is None:
                    skipped.append(f"{Path(path).name} {entry['arch']} {run['label']}")
                else:
                    rows.append(row)
    return Matrix(tuple(rows), tuple(skipped))
