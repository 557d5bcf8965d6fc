"""Arguments of the simulation subcommands."""
from __future__ import annotations

import argparse

from offloadsim import handlers


def add_workload(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vram", default=None, help="VRAM budget, e.g. 4GiB (default: the GPU's)")
    p.add_argument("--ram-budget", default=None, help="RAM budget, e.g. 32GiB (default: the machine's RAM less "
                   "4 GiB; --ram is the machine's installed RAM)")
    p.add_argument("--pinned", default=None, help="pinned RAM budget (default: half the RAM budget)")
    p.add_argument("--batch", type=int, default=1, help="sequences decoded together")
    p.add_argument("--prompt-tokens", type=int, default=128, help="prompt length of the prefill step")
    p.add_argument("--new-tokens", type=int, default=16, help="tokens generated (prefill + N-1 decode steps)")
    p.add_argument("--context", type=int, default=None, help="tokens of context per sequence to reserve a KV cache "
                   "for, as the exported command's -c (default: prompt + new tokens)")
    p.add_argument("--expert-skew", type=float, default=0.0, help="Zipf exponent of expert popularity")
    p.add_argument("--seed", type=int, default=0)
    cache = p.add_mutually_exclusive_group()
    cache.add_argument("--cold", dest="warm", action="store_false", help="empty page cache at start (default)")
    cache.add_argument("--warm", dest="warm", action="store_true", help="page cache holds a previous run's reads")
    p.set_defaults(warm=False)


def add_sim(sub: argparse._SubParsersAction, model_args, machine_args) -> None:
    s = sub.add_parser("simulate", help="run the SimPy timeline for a policy or a plan")
    s.set_defaults(run=handlers.simulate)
    model_args(s)
    machine_args(s)
    how = s.add_mutually_exclusive_group()
    how.add_argument("--policy", default=None, help="stream (default), resident, or a peer engine: airllm, accelerate, llamacpp (with its measured costs) or airllm-ideal, accelerate-ideal, llamacpp-ideal (its placement on offloadsim's engine)")
    how.add_argument("--plan", default=None, help="plan JSON file")
    add_workload(s)
    s.add_argument("--gantt", default=None, help="write a Gantt chart (PNG or SVG)")
    s.add_argument("--trace", default=None, help="write a Chrome trace JSON (Perfetto)")
    s.add_argument("--attribution", type=int, default=8, help="show the N units whose residency helps most")
    s.add_argument("--json", action="store_true")
