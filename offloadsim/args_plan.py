"""Arguments of `plan` and `pareto`."""
from __future__ import annotations

import argparse

from offloadsim import handlers
from offloadsim.outputs import add_force
from offloadsim.args_sim import add_workload
from sim.engines import installed_names

# the engines' folders, listed without importing them (importing the planner would slow every command's start)
ENGINES = installed_names()


def add_plan(sub: argparse._SubParsersAction, model_args, machine_args) -> None:
    p = sub.add_parser("plan", help="choose where every unit lives under the budgets; compare with every baseline")
    p.set_defaults(run=handlers.plan)
    model_args(p)
    machine_args(p)
    add_workload(p)
    p.add_argument("--objective", choices=["request", "total", "token"], default="request",
                   help="minimise the time to finish the request with the load of its weights before the first token "
                   "(default), the request's time without that load, or the time per output token")
    p.add_argument("--time-budget", type=float, default=None, help="a safety net only: the search stops on convergence or an evaluation cap, the same on any machine; if this many seconds pass first it stops and says so (default 300)")
    p.add_argument("--out", default=None, help="write the plan JSON (the validation engine consumes it)")
    p.add_argument("--engine", choices=list(ENGINES), default="offloadsim",
                   help="the engine that will run the model: plan only what it can execute, timed with its own "
                   "pipeline and host costs, and compare every engine (default offloadsim: the full planner)")
    p.add_argument("--export", choices=ENGINES, default=None,
                   help="print an engine's arguments for the plan (with --engine, that engine's own)")
    p.add_argument("--explain", action="store_true", help="per-unit placement and stall contribution")
    p.add_argument("--kv", choices=["auto", "vram", "pinned", "pageable", "cpu"], default=None,
                   help="place the KV cache: in VRAM, in pinned or pageable RAM copied per step, or in RAM with "
                   "attention on the CPU; auto: the planner trades it against weight residency (with --gpus N > 1 "
                   "the default)")
    p.add_argument("--json", action="store_true")
    add_force(p)

    q = sub.add_parser("pareto", help="predicted time per token against the VRAM and RAM budgets, every planner")
    q.set_defaults(run=handlers.pareto)
    model_args(q)
    machine_args(q)
    add_workload(q)
    q.add_argument("--points", type=int, default=7, help="budgets per sweep")
    q.add_argument("--chart", "--out", dest="chart", default=None, help="also draw the curves into this figure "
                   "(PNG, SVG or PDF); none by default")
    q.add_argument("--json", action="store_true")
    add_force(q)


def add_whatif(sub: argparse._SubParsersAction, model_args, machine_args) -> None:
    p = sub.add_parser("whatif", help="plan and predict every combination of machine changes; rank single upgrades")
    p.set_defaults(run=handlers.whatif)
    model_args(p)
    machine_args(p)
    p.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2",
                   help="storage=PRESETS, vram=SIZES, ram=SIZES, link=pcie3,pcie4x8,..., cpu=PRESETS, gpu=PRESETS, "
                   "gpus=1,2 (GPU count), model=MODELS (then MODEL is not used), context=PROMPT_TOKENS (4096 or 4k), "
                   "batch=SEQUENCES")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=3)
    p.add_argument("--workers", type=int, default=2,
                   help="worker processes of a local Dask cluster for grids of 256 combinations or more (the sweep "
                   "extra; without it the grid runs in this process)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on a Dask scheduler already running, like tcp://10.0.0.5:8786 (its workers need offloadsim)")
    p.add_argument("--results", default=None, metavar="FILE.jsonl",
                   help="stream one JSON line per combination to this file as each completes; rerun with the same "
                   "file to skip the combinations already in it (needed above 100,000 combinations)")
    p.add_argument("--plot", default=None, help="bar chart of the single upgrades")
    p.add_argument("--json", action="store_true")
    add_force(p)
