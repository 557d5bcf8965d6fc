"""Handler of `offloadsim whatif`: a grid of machine parts, models, context lengths and batch sizes, run in this
process, on a local Dask cluster (--workers) or on a running scheduler (--scheduler), its rows streamed to a
resumable results file (--results)."""
from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

from hwmodels.presets import load_machine
from hwmodels.units import InputError, check_count
from offloadsim import limits
from offloadsim.output import emit
from offloadsim.outputs import check_output
from sim.model.formats import parse_format
from sim.model.resolve import load_model

KEYS = ("storage", "vram", "ram", "link", "cpu", "gpu", "gpus", "model", "context", "batch")
LOCAL_CLUSTER_MIN = 256  # combinations below which starting worker processes costs more than it saves


def whatif_cmd(args: argparse.Namespace) -> int:
    plot_out = check_output(args.plot, "plot", (args.model, args.machine), (".png", ".svg", ".pdf"), args.force)
    if not args.vary:
        raise InputError("vary: nothing to vary; give at least one --vary KEY=V1,V2, e.g. --vary storage=nvme-gen4,nvme-gen5.")
    workers = limits.workers(args.workers)
    combos = _check_vary(args.vary)
    results = _results_path(args.results)
    if combos > limits.MAX_SWEEP_IN_MEMORY and results is None:
        raise InputError(f"results: {combos:,} combinations are more than the {limits.MAX_SWEEP_IN_MEMORY:,} whatif "
                         "holds to print; give --results FILE.jsonl to stream one line per combination to a file "
                         "(resumable), and whatif prints the fastest and the single upgrades.")
    sweep = _sweep(args)
    from planner import sweep_store
    from planner.sweep import run, summary
    from planner.whatif import plot as plot_whatif
    with ExitStack() as stack:
        done, f = sweep_store.open_results(results, sweep) if results else (set(), None)
        if f is not None:
            stack.enter_context(f)
        todo = sweep.size - len(done)
        backend, where = _backend(args, workers, todo, stack)
        if results or where:
            print(f"whatif: {sweep.size:,} combinations, {len(done):,} already in {args.results}; {todo:,} to run "
                  f"{where or 'in this process'}", file=sys.stderr)
        rows = _collect(run(sweep, backend, skip=done.__contains__), todo, f, keep=results is None,
                        progress=bool(where) or not args.json)
    if results:
        rows = sweep_store.read_rows(results, sweep)
    names = sweep.vary.get("model") or [m.name for m in sweep.models.values()]
    data = {"model": ",".join(names), "machine": sweep.machine.name,
            **summary(sweep, rows, keep_all=combos <= limits.MAX_SWEEP_IN_MEMORY)}
    if results:
        data["results"] = str(results)
    if plot_out:
        plot_whatif(data, str(plot_out))  # written atomically (hwmodels.files.atomic_path)
    return emit(args, data, "\n".join(_lines(data, list(sweep.vary), sweep.size)))


def _sweep(args):
    """The grid the arguments name, every value checked, each model loaded once."""
    from planner.sweep import Sweep
    from planner.whatif import context_tokens, parse_vary
    machine = load_machine(args.machine)
    w = limits.workload(args)
    fmt = parse_format(args.dtype) if args.dtype is not None else None
    own = [i for i in args.vary if i.partition("=")[0].strip() in ("model", "context", "batch")]
    try:
        vary = parse_vary([i for i in args.vary if i not in own])
    except InputError as exc:
        msg = str(exc)
        raise InputError(msg if msg.startswith("vary") else f"vary {msg}") from None
    order = [i.partition("=")[0].strip() for i in args.vary]
    for item in own:
        key, _, values = item.partition("=")
        vary[key.strip()] = [v.strip() for v in values.split(",")]
    vary = {k: vary[k] for k in order}
    for v in vary.get("context", []):  # prompt tokens: 4096 or 4k
        check_count(context_tokens(v), "context", 1, limits.MAX_PROMPT_TOKENS)
    for v in vary.get("batch", []):
        check_count(_int(v, "batch"), "batch", 1, limits.MAX_BATCH)
    models = {name: load_model(name, fmt) for name in vary.get("model", [args.model])}
    most = w.model_copy(update={"prompt_tokens": max(map(context_tokens, vary.get("context", [str(w.prompt_tokens)]))),
                                "batch": max(map(int, vary.get("batch", [w.batch])))})
    for m in models.values():  # the largest request of each model, refused only if no machine could simulate it
        if {"ram", "gpu", "context", "batch", "model"} & set(vary):
            limits.check_work(m, most)
        else:
            limits.check_request(m, machine, most)
    return Sweep(models, machine, w, vary)


def _int(v: str, key: str) -> int:
    try:
        return int(v)
    except ValueError:
        raise InputError(f"vary: {key}={v!r} is not a whole number; give token or sequence counts like {key}=1,8.") from None


def _backend(args, workers: int, todo: int, stack: ExitStack):
    """(backend, where it runs in words, or '' for this process without a note); a Dask client closes with stack."""
    from planner import sweep_dask
    from planner.sweep import in_process
    if args.scheduler:
        c = stack.enter_context(sweep_dask.client(workers, args.scheduler))
        return sweep_dask.backend(c), f"on the Dask scheduler at {args.scheduler}"
    if workers == 1 or todo < LOCAL_CLUSTER_MIN:
        return in_process, ""
    if not sweep_dask.available():
        return in_process, (f"in this process (Dask is not installed: {sweep_dask.INSTALL} to run on --workers "
                            f"{workers} processes or a cluster)")
    c = stack.enter_context(sweep_dask.client(workers))
    return sweep_dask.backend(c), f"on a local Dask cluster of {workers} worker processes"


def _collect(chunks, total: int, f, keep: bool, progress: bool) -> list[dict]:
    """Each chunk's rows appended to the results file as it completes; kept in memory when keep."""
    from tqdm import tqdm

    from planner.sweep_store import append
    rows = []
    with tqdm(total=total, disable=not progress, desc="what-if", unit="combination", file=sys.stderr) as bar:
        for chunk in chunks:
            if f is not None:
                append(f, chunk)
            if keep:
                rows += chunk
            bar.update(len(chunk))
    return rows


def _results_path(value: str | None) -> Path | None:
    if value is None:
        return None
    p = Path(value)
    if p.suffix != ".jsonl" or not p.parent.is_dir():
        raise InputError(f"results: {value!r} is not a .jsonl file in an existing folder; give one like "
                         "sweep.jsonl (rerun with the same file to resume).")
    return p


def _lines(data: dict, keys: list[str], size: int) -> list[str]:
    lines = [" ".join(f"{k:>12}" for k in keys) + f" {'request s':>10} {'TTFT s':>9} {'s/token':>9} {'tok/s':>8}  critical"]
    for r in sorted(data["rows"], key=lambda r: r.get("request_s", float("inf")))[:40]:
        if r["feasible"]:
            lines.append(" ".join(f"{r['combo'][k]:>12}" for k in keys) + f" {r['request_s']:10.3f} {r['ttft_s']:9.3f} "
                         f"{r['time_per_token_s']:9.4f} {r['tokens_per_s']:8.2f}  {r['bottleneck']} ({r['policy']})")
        else:
            lines.append(" ".join(f"{r['combo'][k]:>12}" for k in keys) + f"  infeasible: {r.get('reason') or 'no plan fits'}")
    if size > 40:
        lines.append(f"... {size - 40:,} more ({'in ' + data['results'] if 'results' in data else '--json for all'})")
    if data.get("each_row_its_own_plan"):
        lines.append("(too many rows to make monotone here: each row is its own combination's plan)")
    lines.append("single upgrades from " + ", ".join(f"{k}={v}" for k, v in data["base"].items()) + ":")
    lines += [f"  {u['change']:<24} {u['speedup']:6.2f}x  (request {u.get('request_s', float('nan')):.3f} s, "
              f"{u['time_per_token_s']:.4f} s/token)" for u in data["upgrades"]]
    return lines


def _check_vary(items: list[str]) -> int:
    """Each --vary is KEY=V1,V2 with a known key, given once, with distinct non-empty values; returns the combinations."""
    seen: set[str] = set()
    combos = 1
    for item in items:
        key, eq, values = str(item).partition("=")
        key = key.strip()
        vals = [v.strip() for v in values.split(",")]
        if not eq or key not in KEYS or not values.strip() or any(not v for v in vals):
            raise InputError(f"vary: {item[:80]!r} is not KEY=V1,V2 with KEY one of {', '.join(KEYS)} and no empty "
                             "values; e.g. --vary storage=sata,nvme-gen4.")
        if key in seen:
            raise InputError(f"vary: {key!r} is given twice; put all its values in one --vary {key}=V1,V2.")
        if len(set(vals)) != len(vals):
            raise InputError(f"vary: {item[:80]!r} repeats a value; give each value once.")
        seen.add(key)
        combos *= len(vals)
        if combos > limits.MAX_SWEEP_COMBOS:
            raise InputError(f"vary: the values given make more than {limits.MAX_SWEEP_COMBOS:,} combinations (a "
                             "results file of some gigabytes); split the sweep by one key, e.g. one run per model.")
    return combos
