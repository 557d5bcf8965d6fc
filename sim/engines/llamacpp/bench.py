"""llama.cpp's own measurements (llama-bench -o json) as runs of the llama.cpp engine model, and one host's CPU speed
calibrated on them.

A llama-bench record becomes a run: the placement its -ngl (and --n-cpu-moe) gives
(sim.engines.llamacpp.layout.llamacpp_ngl), its weights the mapped model file unless its load mode reads them into
pinned host buffers (mapped_of), its time per token (a generation test: the median repetition over its G tokens)
or its first token (a prompt test).

The engine's costs were fitted on one host (the h200-testbox preset's peers.llamacpp, lab/journal/peers.md); the same
settings timed on hosts of the same kind ran up to 28% apart in their CPU share (lab/data/peers/llamacpp-{aa,ah}.json),
as hosts shared with other work do. `calibrate_host` measures that on the user's host from their own llama-bench
runs: one factor on the CPU's speeds (sim.engines.llamacpp.fitting.host_scaled), fitted by least squares of the log
error over the generation tests given. No torch.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from hwmodels.specs import MachineSpec
from sim.engines import costs_of
from sim.engines.llamacpp.costs import LlamacppCosts
from hwmodels.units import InputError
from sim.plan import Budgets, Plan, Workload
from sim.engines.llamacpp.layout import llamacpp_ngl
from sim.model.shapes import ModelShape
from sim.engines.llamacpp.fitting import HOST_SCALE_BOUNDS, fit_host_scale, host_scaled
from sim.engines.measured import PeerRun, floor_pct, predict, with_peer
from hwmodels.presets import load_machine

UNMAPPED_LOAD_MODES = ("none", "mlock", "dio")  # llama-model-loader.cpp: only auto, mmap and mmap+mlock map the file
MAX_BENCH_BYTES = 64 * 2**20
MAX_RECORDS = 10_000


def bench_budgets(machine: MachineSpec, mapped: bool = True) -> Budgets:
    """The machine's whole GPU and RAM (llama-bench runs alone), nothing pinned when llama.cpp maps the model file,
    all of the RAM when it reads the file into pinned host buffers (mapped_of)."""
    ram = machine.host_memory.capacity_bytes
    return Budgets(vram_bytes=machine.gpu.vram_bytes, ram_bytes=ram, pinned_bytes=0 if mapped else ram)


def mapped_of(args: list[str], rec: dict | None = None) -> bool:
    """Whether a run's CPU weights are the mapped model file (llama.cpp's default) rather than its GPU's pinned host
    buffers: a load mode that does not map the file (-lm/--load-mode none, mlock or dio; older builds' --no-mmap or
    llama-bench -mmp 0) reads it into them, unless --no-host keeps plain memory. llama-bench's record says which
    (load_mode, no_host) where it has them; the arguments otherwise."""
    rec = rec or {}
    value = {a: args[i + 1] for i, a in enumerate(args[:-1])}
    mode = rec.get("load_mode") or value.get("-lm") or value.get("--load-mode")
    unmapped = mode in UNMAPPED_LOAD_MODES if mode else \
        "--no-mmap" in args or (value.get("-mmp") or value.get("--mmap")) == "0"
    no_host = rec["no_host"] if rec.get("no_host") is not None else \
        "--no-host" in args and value.get("--no-host") not in ("0", "false")
    if "use_mmap" in rec and not mode and not args:  # a plain llama-bench record: its use_mmap field says it
        unmapped = not rec["use_mmap"]
    return not unmapped or bool(no_host)


def flash_attn_of(rec: dict) -> str:
    """A llama-bench record's -fa as LlamacppCosts.flash_attn: its flash_attn field holds -1 for auto (the default), 0 for
    off, 1 for on."""
    return {0: "off", 1: "on"}.get(rec.get("flash_attn"), "auto")


def median_time_s(rec: dict) -> float:
    """A llama-bench record's median repetition (s): robust to a slow first repetition (a CUDA graph's warm-up)."""
    return statistics.median(rec.get("samples_ns") or [rec["avg_ns"]]) / 1e9


def run_of(rec: dict, shape: ModelShape, machine: MachineSpec, plan: Plan | None, label: str) -> PeerRun:
    """One llama-bench record as a run: a generation test predicts its time per token (the median repetition's
    total over G tokens), a prompt test its first token; priced with the record's -fa."""
    gen = rec["n_gen"] > 0
    w = Workload(batch=1, prompt_tokens=1 if gen else rec["n_prompt"], new_tokens=rec["n_gen"] + 1 if gen else 1)
    mapped = mapped_of(rec.get("args") or [], rec)
    b = bench_budgets(machine, mapped)
    plan = plan or llamacpp_ngl(shape, machine, w, b, rec["n_gpu_layers"], rec.get("n_cpu_moe") or 0, mapped)
    t = median_time_s(rec)
    # its warm-up run and the repetition before left the decode graph captured (the median repetition replays it)
    return PeerRun(label, plan, w, b, t / rec["n_gen"] if gen else float("nan"), float("nan") if gen else t,
                   graphs_warm=True, peer_update={"flash_attn": flash_attn_of(rec)})


def _parse(path: Path, fix: str) -> object:
    """The file as JSON (an array) or JSON lines (one object a line), a UTF-8 byte-order mark and leading blank space
    allowed; one sentence otherwise."""
    try:
        if not path.is_file():
            raise InputError(f"bench: {str(path)!r} is not a regular file; {fix}.")
        if path.stat().st_size > MAX_BENCH_BYTES:
            raise InputError(f"bench: {str(path)!r} is larger than any llama-bench output ({MAX_BENCH_BYTES >> 20} "
                             f"MiB); {fix}.")
        text = path.read_bytes().decode("utf-8-sig").lstrip()
        if text.startswith("{"):  # -o jsonl
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise InputError(f"bench: {str(path)!r} is neither a JSON array nor JSON lines; {fix}.") from None
    except OSError as exc:
        raise InputError(f"bench: {str(path)!r} cannot be read ({exc.strerror}); check the path.") from None


def _number(x, lowest: float) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= lowest


def read_records(path: Path) -> list[dict]:
    """llama-bench's records from its `-o json` (an array) or `-o jsonl` (one object a line) output, each checked
    for the fields a run needs (finite, in range); one sentence naming the file, the record and the fix otherwise."""
    fix = "give the output of llama-bench -o json"
    data = _parse(path, fix)
    if not isinstance(data, list) or not data or len(data) > MAX_RECORDS:
        raise InputError(f"bench: {str(path)!r} holds no list of llama-bench records (1 to {MAX_RECORDS}); {fix}.")
    ints = {"n_prompt": 0, "n_gen": 0, "n_gpu_layers": -1, "n_cpu_moe": 0, "n_depth": 0}  # the least each may be
    for i, rec in enumerate(data):
        where = f"bench: record {i} of {str(path)!r}"
        if not isinstance(rec, dict):
            raise InputError(f"{where} is not an object; {fix}.")
        for k, least in ints.items():
            if (k in ("n_prompt", "n_gen", "n_gpu_layers") or rec.get(k) is not None) and \
                    not (isinstance(rec.get(k), int) and _number(rec.get(k), least)):
                raise InputError(f"{where} has no valid {k!r} (an integer from {least}); {fix}.")
        if not _number(rec.get("avg_ns"), 0) or rec["avg_ns"] == 0:
            raise InputError(f"{where} has no valid 'avg_ns' (a positive finite time); {fix}.")
        if rec["n_gen"] == 0 and rec["n_prompt"] == 0:
            raise InputError(f"{where} timed nothing (n_prompt and n_gen 0); {fix}.")
        samples = rec.get("samples_ns")
        if samples is not None and (not isinstance(samples, list) or not samples
                                    or not all(_number(x, 0) and x > 0 for x in samples)):
            raise InputError(f"{where} has samples_ns that are not positive finite times; {fix}.")
        args = rec.get("args")
        if args is not None and not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
            raise InputError(f"{where} has 'args' that are not a list of strings; {fix}.")
    return data


def _base_spec(machine: MachineSpec) -> tuple[LlamacppCosts, str]:
    """The machine's llama.cpp costs (its own, or derived from its parts and the h200-testbox preset's where it has
    none: sim/engines/llamacpp/derived.py), or where its own have no CPU speeds the h200-testbox preset's (the
    engine's kernels as measured there), with a note saying which."""
    spec = costs_of(machine, "llamacpp")
    if spec.cpu_bytes_per_s is None:
        return costs_of(load_machine("h200-testbox"), "llamacpp"), "llama.cpp's costs of the h200-testbox preset, "
    if not machine.peers.get("llamacpp"):
        return spec, "llama.cpp's costs derived from this machine's parts and the h200-testbox preset's, "
    return spec, ""


def calibrate_host(shape: ModelShape, machine: MachineSpec, records: list[dict],
                   source: str) -> tuple[MachineSpec, dict]:
    """The machine with its llama.cpp costs scaled to this host's CPU (fit_host_scale over the generation tests of
    one sequence given), and a report: the scale and, per test, predicted before and after against measured."""
    # generation tests alone (-n): a -pg test's time holds its prompt too, a -d test starts from a filled context
    gen = [r for r in records if r["n_gen"] > 0 and r["n_prompt"] == 0 and not r.get("n_depth")]
    if not gen:
        raise InputError("bench: no generation test (n_gen > 0, no prompt, from an empty context) among the "
                         "records; run llama-bench with -n 32.")
    spec, note = _base_spec(machine)
    m0 = with_peer(machine, "llamacpp", spec)
    runs = []
    for i, rec in enumerate(gen):
        ngl = rec["n_gpu_layers"] if 0 <= rec["n_gpu_layers"] <= shape.n_blocks + 1 else shape.n_blocks + 1  # -1: all
        try:
            runs.append(run_of(dict(rec, n_gpu_layers=ngl), shape, m0, None, f"-ngl {ngl}"
                               + (f" -ncmoe {rec['n_cpu_moe']}" if rec.get("n_cpu_moe") else "")))
        except InputError as exc:  # e.g. the layers asked for do not fit the profile's GPU
            raise InputError(f"bench: generation test {i} (-ngl {ngl}) cannot run on this profile: {exc}") from None
    held = [r for r in runs if any(p.compute == "cpu" for p in r.plan.placements
                                   if shape.unit(p.unit).kind != "embedding")]
    if not held:
        raise InputError("bench: every generation test keeps all layers on the GPU, which says nothing of this "
                         "host's CPU; add one with weights on the CPU, e.g. llama-bench -ngl 0 -n 32.")
    scale = fit_host_scale("llamacpp", [(shape, m0, r) for r in held])
    lo, hi = HOST_SCALE_BOUNDS
    if not lo * 1.001 < scale < hi * 0.999:
        raise InputError(f"bench: this host's CPU runs llama.cpp {scale:.2f}x as fast as the profile's, at the "
                         f"edge of what one factor can stand for ({lo} to {hi}); calibrate the machine first "
                         "(offloadsim calibrate) or check that the model file is the one benchmarked.")
    scaled = host_scaled(spec, scale)
    said = (f"[M] measured: {note}their CPU speeds scaled by {scale:.3f} to this host, fitted on {len(held)} "
            f"llama-bench generation tests ({', '.join(r.label for r in held)}) of {shape.name} by offloadsim "
            f"calibrate-peer (sim/engines/llamacpp/bench.py) from {source}")
    m1 = with_peer(machine, "llamacpp", scaled)
    m1 = m1.model_copy(update={"sources": {**m1.sources, **{f"peers.llamacpp.{k}": said for k in m1.peers["llamacpp"]}}})
    rows = [{"run": r.label, "tokens": rec["n_gen"], "measured_s": r.measured_tpot_s,
             "before_s": predict(shape, m0, r)["time_per_token_s"],
             "after_s": predict(shape, m1, r)["time_per_token_s"], "used": r in held} for rec, r in zip(gen, runs)]
    return m1, {"engine": "llamacpp", "host_cpu_scale": scale, "runs": rows, "source": said,
                "repeats": repeats(gen, runs)}


def repeats(gen: list[dict], runs: list[PeerRun]) -> dict:
    """How far this host moved a setting the records time more than once (the same placement, tokens, -fa, threads,
    load mode and arguments; e.g. llama-bench run again minutes later): per setting its floor (floor_pct), the least
    any prediction of its timings can miss them by; {'settings': 0, ...} when no setting was timed twice."""
    groups: dict[tuple, list[float]] = {}
    for rec, r in zip(gen, runs):
        args = rec.get("args") or []
        key = (r.label, rec["n_gen"], rec.get("flash_attn"), rec.get("n_threads"), mapped_of(args, rec), tuple(args))
        groups.setdefault(key, []).append(r.measured_tpot_s)
    floors = [floor_pct(v) for v in groups.values() if len(v) > 1]
    return {"settings": len(floors), "worst_floor_pct": max(floors) if floors else None,
            "median_floor_pct": statistics.median(floors) if floors else None}
