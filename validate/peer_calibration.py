"""A peer engine's host costs (machine.peers) fitted on measured runs of the real engine.

The engine model (its package under sim/engines: the placement and the schedule hooks) predicts each run from the
machine profile with the peer's costs at zero; what the real engine took beyond that is, per token, a non-negative
combination of the peer's cost parameters times how often the run pays each (per step, per module loaded, per unit
loaded), solved by non-negative least squares (scipy.optimize.nnls) over the calibration runs. Runs not used here
are the held-out check (lab/reports/peers_report.py). No torch: runs are given as plans and measured times.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares, nnls

from hwmodels.specs import MachineSpec
from sim.costs.tiers import tier_row
from sim.plan import Budgets, Plan, Workload
from sim.costs.compute import matrix_rows
from sim.engines import costs_of, with_costs
from sim.engines.airllm.loader import airllm_modules
from sim.engines.base import Costs
from sim.engines.llamacpp.costs import LlamacppCosts
from sim.engines.llamacpp.graphs import cpu_stream_bytes_per_s, ggml_flash_attention, graph_warmup_steps
from sim.model.shapes import (ATTENTION_KINDS, GGML_MOE_WEIGHTS, ModelShape, ggml_moe_ops, ggml_ops, ggml_weights,
                        param_modules)
from sim.run.simulate import fast_simulate

PARAMS = {"accelerate": ("step_s", "load_module_s", "cpu_compute_scale"), "airllm": ("load_unit_s",),
          "llamacpp": ("step_s", "cpu_bytes_per_s", "cpu_cache_bytes_per_s", "cpu_head_bytes_per_s", "cpu_op_s",
                       "gpu_op_s", "gpu_row_s", "gpu_compute_scale", "gpu_multi_row_s", "gpu_row_token_s",
                       "cpu_flops_per_s", "gpu_offload_split_s", "gpu_graph_warmup_op_s", "gpu_mm_attention_s",
                       "cpu_mm_attention_s", "cpu_row_s")}
SCALES = {"cpu_compute_scale", "gpu_compute_scale"}  # multipliers: neutral 1 and started there, not from the nnls
RATES = {"cpu_bytes_per_s": "memory_bytes_per_s", "cpu_cache_bytes_per_s": "memory_bytes_per_s",
         "cpu_head_bytes_per_s": "memory_bytes_per_s", "cpu_flops_per_s": "flops_per_s"}  # started there
NONLINEAR = ("cpu_flops_per_s",)  # not additive: left to the least squares, absent in the linear start


@dataclass(frozen=True)
class PeerRun:
    label: str
    plan: Plan
    workload: Workload
    budgets: Budgets
    measured_tpot_s: float
    measured_ttft_s: float
    graphs_warm: bool = False  # an identical run just before left the engine's graphs captured (llama-bench's reps)
    peer_update: dict = field(default_factory=dict)  # how the engine that ran differs, e.g. its build's kernels


def with_peer(machine: MachineSpec, engine: str, spec: Costs) -> MachineSpec:
    """The machine with `engine`'s costs replaced by `spec` (sim.engines.with_costs)."""
    return with_costs(machine, engine, spec)


def predict(model: ModelShape, machine: MachineSpec, run: PeerRun) -> dict:
    peer = costs_of(machine, run.plan.engine)
    update = dict(run.peer_update)
    if run.graphs_warm and getattr(peer, "gpu_graph_warmup_op_s", 0.0):
        update["gpu_graph_warmup_op_s"] = 0.0
    if update and peer is not None:
        machine = with_peer(machine, run.plan.engine, peer.model_copy(update=update))
    return fast_simulate(model, machine, run.plan, run.workload, run.budgets)


def features(model: ModelShape, run: PeerRun, params: tuple[str, ...], spec: Costs | None = None) -> np.ndarray:
    """How many times per token the run pays each parameter, as sim.run.schedule prices it; `spec`: the peer's costs
    the run is priced with (its flash-attention settings, PeerRun.peer_update over them), the defaults if none."""
    t = run.plan.tiers()
    loaded = [u for u in model.units if not tier_row(t[u.name].tier).resident and t[u.name].compute == "gpu"]
    # a block's routed experts: one set of operators per block and step, where its experts are (sim.run.schedule)
    expert_blocks = {dev: {u.block for u in model.units if u.kind == "expert" and t[u.name].compute == dev}
                     for dev in ("cpu", "gpu")}
    moe_ops = ggml_moe_ops(model.experts_per_token) if model.is_moe else 0
    tokens = run.workload.batch  # per decode step: one of every sequence
    decode = bool(np.isfinite(run.measured_tpot_s))  # a prompt test's one step is many tokens
    multi = tokens > 1  # sim.costs.compute.gpu_compute_s: any decode step of several sequences
    offload = run.plan.gpu_offload_min_tokens is not None and tokens >= run.plan.gpu_offload_min_tokens
    peer = (spec or LlamacppCosts()).model_copy(update=run.peer_update)
    fused = ggml_flash_attention(model, run.plan, getattr(peer, "flash_attention", True),
                                 getattr(peer, "flash_attn", "auto"))
    # what the CPU computes on a step: at offload's step sizes ggml multiplies the CPU-held weights on the GPU
    on_cpu = [u for u in model.units if t[u.name].compute == "cpu" and not (offload and u.kind != "embedding")]
    on_gpu = [u for u in model.units if u not in on_cpu]
    # a routed expert runs when a token is routed to it: k of a block's n for each token, drawn apart
    share = {u.name: 1.0 - (1.0 - 1.0 / model.n_routed_experts) ** (model.experts_per_token * tokens)
             if u.kind == "expert" else 1.0 for u in model.units}
    ops = {"cpu": float(sum(ggml_ops(u.kind, model.family, fused["cpu"]) for u in on_cpu)
                        + moe_ops * len({u.block for u in on_cpu if u.kind == "expert"})),
           "gpu": float(sum(ggml_ops(u.kind, model.family) for u in on_gpu)
                        + moe_ops * len({u.block for u in on_gpu if u.kind == "expert"}))}
    rows = sum(matrix_rows(u) * share[u.name] for u in on_gpu)
    # a graph warm-up launches the GPU-placed units' operators (sim.run.schedule: not those of offloaded weights)
    placed_gpu_ops = float(sum(ggml_ops(u.kind, model.family) for u in model.units if t[u.name].compute == "gpu")
                           + moe_ops * len(expert_blocks["gpu"]))
    attention = float(sum(u.kind in ATTENTION_KINDS for u in model.units if t[u.name].compute == "gpu"))
    splits = sum(ggml_weights(u.kind, model.family) for u in model.units if t[u.name].compute == "cpu"
                 and u.kind != "embedding") + GGML_MOE_WEIGHTS * len(expert_blocks["cpu"]) if offload else 0
    count = {"step_s": 1.0, "load_module_s": float(sum(param_modules(u.kind, model.family) for u in loaded)),
             "load_unit_s": float(sum(airllm_modules(u, model.tied_head) for u in model.units)
                                  if run.plan.engine == "airllm" else len(loaded)),
             "cpu_op_s": ops["cpu"], "gpu_op_s": ops["gpu"],
             "gpu_row_s": 0.0 if multi else rows, "gpu_multi_row_s": rows if multi else 0.0,
             "gpu_row_token_s": rows * tokens if multi else 0.0,
             "cpu_flops_per_s": float(tokens > 1 and ops["cpu"] > 0),  # whether the run measures it (identifiable)
             "gpu_offload_split_s": float(splits),
             "gpu_mm_attention_s": attention if decode and tokens == 1 and not fused["gpu"] else 0.0,
             "cpu_row_s": float(sum(matrix_rows(u) * share[u.name] for u in on_cpu if u.kind != "embedding")),
             "cpu_mm_attention_s": float(sum(u.kind in ATTENTION_KINDS for u in on_cpu))
             if decode and tokens == 1 and not fused["cpu"] else 0.0,
             "gpu_graph_warmup_op_s": 0.0 if run.graphs_warm else placed_gpu_ops * len(graph_warmup_steps(run.workload))
             / max(run.workload.new_tokens - 1, 1)}
    return np.array([count[p] for p in params])


def measured(run: PeerRun) -> tuple[str, float]:
    """What a run measured: its time per token, or its first token where it timed that alone (a prompt test)."""
    return ("time_per_token_s", run.measured_tpot_s) if np.isfinite(run.measured_tpot_s) \
        else ("ttft_s", run.measured_ttft_s)


PROBE = {"cpu_bytes_per_s": 1.0, "cpu_cache_bytes_per_s": 2.0, "cpu_head_bytes_per_s": 3.0}
OPTIONAL_RATES = ("cpu_cache_bytes_per_s", "cpu_head_bytes_per_s")  # absent: cpu_bytes_per_s holds instead
# what only some runs measure (several sequences decoded together): left absent (their default) when no run does
MEASURED_BY_SOME = ("gpu_multi_row_s", "gpu_row_token_s", "cpu_flops_per_s", "gpu_offload_split_s",
                    "gpu_graph_warmup_op_s", "gpu_mm_attention_s", "cpu_mm_attention_s")


def rate_bytes(model: ModelShape, plan: Plan, machine: MachineSpec, spec: Costs,
               batch: int = 1) -> dict[str, float]:
    """Bytes per decode step of `batch` sequences the plan's CPU units stream at each of the peer's CPU speeds
    (sim.run.schedule's choice: memory, the last-level cache, the head's own); none on a step that ggml offloads (the
    weights are copied to the GPU instead); the embedding looks rows up and streams none."""
    probe = spec.model_copy(update=PROBE)
    speed = {v: k for k, v in PROBE.items()}
    t = plan.tiers()
    out = dict.fromkeys(PROBE, 0.0)
    if plan.gpu_offload_min_tokens is not None and batch >= plan.gpu_offload_min_tokens:
        return out
    for u in model.units:
        if t[u.name].compute == "cpu" and u.kind != "embedding":
            kind = "lm_head" if u.kind == "lm_head" else "decoder"
            out[speed[cpu_stream_bytes_per_s(model, plan, machine, probe, kind)]] += u.nbytes
    return out


def multiply_start(runs: list[tuple[ModelShape, MachineSpec, PeerRun]], start: dict) -> float:
    """Where the least squares starts the CPU's multiply rate: the rate at which the CPU units of the runs of
    several sequences would multiply in the time they stream (their FLOPs over their streaming time at the started
    speeds), where both terms of the overlap matter (far from it one does not move the fit)."""
    flops = stream = 0.0
    for model, m, r in runs:
        t, w = r.plan.tiers(), r.workload
        cpu = [u for u in model.units if t[u.name].compute == "cpu" and u.kind != "embedding"]
        if w.batch > 1 and cpu:
            flops += sum(u.flops(w.batch, 1, w.prompt_tokens) for u in cpu)
            stream += sum(u.bytes_touched(w.batch, 1, w.prompt_tokens) for u in cpu) / start["cpu_bytes_per_s"]
    return flops / stream if stream > 0 else start["cpu_flops_per_s"]


def identifiable(params: tuple[str, ...], runs: list[tuple[ModelShape, MachineSpec, PeerRun]],
                 spec: Costs) -> tuple[str, ...]:
    """`params` less the speed from the CPU's last-level cache when no run's CPU weights fit in it, the head's own
    speed when no run computes the head on the CPU from memory after CPU layers (nothing would measure it: it stays
    absent, and the memory speed holds for every plan), and the costs of several sequences decoded together when no
    run decodes several (MEASURED_BY_SOME: they keep their defaults)."""
    # an engine whose parameters hold neither (its costs have no CPU stream speeds) has nothing to drop
    seen = {p for model, m, r in runs for p, b in rate_bytes(model, r.plan, m, spec, r.workload.batch).items() if b > 0} \
        if set(params) & set(OPTIONAL_RATES) else set()
    paid = {p for model, m, r in runs for p, n in zip(MEASURED_BY_SOME, features(model, r, MEASURED_BY_SOME, spec))
            if n} if set(params) & set(MEASURED_BY_SOME) else set()
    return tuple(p for p in params if (p not in OPTIONAL_RATES or p in seen)
                 and (p not in MEASURED_BY_SOME or p in paid))


def fit(engine: str, runs: list[tuple[ModelShape, MachineSpec, PeerRun]]) -> Costs:
    """The peer's parameters that best explain `runs` (relative error of what each measured, its time per token or
    its first token alone, least squares through the simulator): costs >= 0, started from the linear estimate on the
    per-token runs (residual = costs x counts + bytes / rates, the rates' inverses solved for); kernel scales >=
    0.05, started from 1; kernel rates > 0, started at the machine's CPU values where no run streams at them."""
    cpu, spec0 = runs[0][1].cpu, costs_of(runs[0][1], engine)
    params = identifiable(PARAMS[engine], runs, spec0)
    unmeasured = {p: type(spec0).model_fields[p].default for p in PARAMS[engine]
                  if p in OPTIONAL_RATES + MEASURED_BY_SOME and p not in params}
    costs = tuple(p for p in params if p not in SCALES and p not in RATES)
    rates = tuple(p for p in params if p in RATES and p not in NONLINEAR)
    start = {p: float(getattr(cpu, RATES[p])) if p in RATES else 1.0 if p in SCALES else 0.0 for p in params}
    # the rates' time left to the solve; a speed no run measures stays absent (not a stale value of the profile's)
    base = spec0.model_copy(update={**start, **dict.fromkeys(rates, 1e30), **unmeasured,
                                    **dict.fromkeys(set(NONLINEAR) & set(params))})  # the roofline meanwhile
    per_token = [(model, m, r) for model, m, r in runs if np.isfinite(r.measured_tpot_s)]
    A = np.array([[*features(model, r, costs, spec0),
                   *(rate_bytes(model, r.plan, m, spec0, r.workload.batch)[p] for p in rates)]
                  for model, m, r in per_token])
    b = np.array([r.measured_tpot_s - predict(model, with_peer(m, engine, base), r)["time_per_token_s"]
                  for model, m, r in per_token])
    used = [i for i in range(A.shape[1] if A.size else 0) if A[:, i].any()]  # scipy's nnls aborts on zero columns
    if used:
        names = [(costs + rates)[i] for i in used]
        x = nnls(A[:, used], np.maximum(b, 0.0))[0]
        start.update({p: (1.0 / v if v > 0 else start[p]) if p in RATES else v for p, v in zip(names, x)})
    if "cpu_flops_per_s" in params:
        start["cpu_flops_per_s"] = multiply_start(runs, start)
    x0 = np.array([start[p] for p in params])
    lower = np.array([0.05 if p in SCALES else 1e-6 * x0[i] if p in RATES else 0.0 for i, p in enumerate(params)])

    def spec(x: np.ndarray) -> Costs:
        return base.model_copy(update={p: float(v) for p, v in zip(params, x)})

    def residuals(x: np.ndarray) -> np.ndarray:
        s = spec(np.maximum(x, lower))
        return np.array([predict(model, with_peer(m, engine, s), r)[measured(r)[0]] / measured(r)[1] - 1
                         for model, m, r in runs])
    res = least_squares(residuals, x0, bounds=(lower, np.inf), x_scale=np.maximum(x0, 1e-3), diff_step=1e-3)
    return spec(res.x)


HOST_SCALE_BOUNDS = (0.25, 4.0)  # a host this much slower or faster than the one fitted: beyond, refit instead


def floor_pct(times: list[float]) -> float:
    """How far one setting timed several times moved, as the least worst |error| any single prediction of them can
    reach (%): halfway in ratio between the fastest and the slowest, (max - min) / (max + min)."""
    return 100 * (max(times) - min(times)) / (max(times) + min(times))


def host_scaled(spec: LlamacppCosts, scale: float) -> LlamacppCosts:
    """The peer's costs on a host whose CPU runs the engine's kernels `scale` times as fast as the host they were
    fitted on (LlamacppCosts.scaled)."""
    return spec.scaled(scale)


def fit_scalar(engine: str, runs: list[tuple[ModelShape, MachineSpec, PeerRun]], spec_of, bounds) -> float:
    """The value x in `bounds` whose peer costs spec_of(x) best explain `runs`: least squares of the log of
    predicted over measured (a run twice as slow weighs as one twice as fast), over log x (scipy's bounded
    minimize_scalar)."""
    from scipy.optimize import minimize_scalar

    def loss(log_x: float) -> float:
        s = spec_of(float(np.exp(log_x)))
        errs = [np.log(predict(model, with_peer(m, engine, s), r)[measured(r)[0]] / measured(r)[1])
                for model, m, r in runs]
        return float(np.sum(np.square(errs)))
    lo, hi = np.log(bounds)
    return float(np.exp(minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4}).x))


def fit_host_scale(engine: str, runs: list[tuple[ModelShape, MachineSpec, PeerRun]]) -> float:
    """The CPU scale (host_scaled) that best explains `runs` of the real engine on this host (fit_scalar), bounded
    by HOST_SCALE_BOUNDS. Runs that keep nothing on the CPU do not move it: give at least one that does."""
    spec0 = costs_of(runs[0][1], engine)
    return fit_scalar(engine, runs, lambda x: host_scaled(spec0, x), HOST_SCALE_BOUNDS)
