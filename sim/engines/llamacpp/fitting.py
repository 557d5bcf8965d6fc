"""What validate/peer_calibration.py fits of llama.cpp's costs on llama-bench runs (how often a run pays each, as
sim.run.schedule prices it), and one host's CPU speed relative to the host they were fitted on (fit_host_scale)."""
from __future__ import annotations

import numpy as np

from hwmodels.specs import MachineSpec
from sim.costs.compute import matrix_rows
from sim.costs.tiers import tier_row
from sim.engines import costs_of
from sim.engines.base import Costs
from sim.engines.llamacpp.costs import LlamacppCosts
from sim.engines.llamacpp.graphs import cpu_stream_bytes_per_s, ggml_flash_attention, graph_warmup_steps
from sim.engines.measured import Fitting, PeerRun, fit_scalar
from sim.model.shapes import (ATTENTION_KINDS, GGML_MOE_WEIGHTS, ModelShape, ggml_moe_ops, ggml_ops, ggml_weights,
                              param_modules)
from sim.plan import Plan

PROBE = {"cpu_bytes_per_s": 1.0, "cpu_cache_bytes_per_s": 2.0, "cpu_head_bytes_per_s": 3.0}
HOST_SCALE_BOUNDS = (0.25, 4.0)  # a host this much slower or faster than the one fitted: beyond, refit instead


class LlamacppFitting(Fitting):
    params = ("step_s", "cpu_bytes_per_s", "cpu_cache_bytes_per_s", "cpu_head_bytes_per_s", "cpu_op_s", "gpu_op_s",
              "gpu_row_s", "gpu_compute_scale", "gpu_multi_row_s", "gpu_row_token_s", "cpu_flops_per_s",
              "gpu_offload_split_s", "gpu_graph_warmup_op_s", "gpu_mm_attention_s", "cpu_mm_attention_s", "cpu_row_s")
    scales = frozenset({"gpu_compute_scale"})
    rates = {"cpu_bytes_per_s": "memory_bytes_per_s", "cpu_cache_bytes_per_s": "memory_bytes_per_s",
             "cpu_head_bytes_per_s": "memory_bytes_per_s", "cpu_flops_per_s": "flops_per_s"}  # started there
    nonlinear = ("cpu_flops_per_s",)
    optional_rates = ("cpu_cache_bytes_per_s", "cpu_head_bytes_per_s")  # absent: cpu_bytes_per_s holds instead
    # what only some runs measure (several sequences decoded together): left absent (their default) when no run does
    measured_by_some = ("gpu_multi_row_s", "gpu_row_token_s", "cpu_flops_per_s", "gpu_offload_split_s",
                        "gpu_graph_warmup_op_s", "gpu_mm_attention_s", "cpu_mm_attention_s")

    def run_update(self, run: PeerRun, peer: Costs | None) -> dict:
        """The run's differences, and no graph warm-up where an identical run just before left the graphs
        captured."""
        update = dict(run.peer_update)
        if run.graphs_warm and getattr(peer, "gpu_graph_warmup_op_s", 0.0):
            update["gpu_graph_warmup_op_s"] = 0.0
        return update

    def counts(self, model: ModelShape, run: PeerRun, spec: Costs | None) -> dict[str, float]:
        """How many times per token the run pays each cost; `spec`: llama.cpp's costs the run is priced with (its
        flash-attention settings, PeerRun.peer_update over them), the defaults if none."""
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
        warmup = 0.0 if run.graphs_warm else placed_gpu_ops * len(graph_warmup_steps(run.workload)) \
            / max(run.workload.new_tokens - 1, 1)
        return {"step_s": 1.0, "load_module_s": float(sum(param_modules(u.kind, model.family) for u in loaded)),
                "cpu_op_s": ops["cpu"], "gpu_op_s": ops["gpu"],
                "gpu_row_s": 0.0 if multi else rows, "gpu_multi_row_s": rows if multi else 0.0,
                "gpu_row_token_s": rows * tokens if multi else 0.0,
                "cpu_flops_per_s": float(tokens > 1 and ops["cpu"] > 0),  # whether the run measures it (identifiable)
                "gpu_offload_split_s": float(splits),
                "gpu_mm_attention_s": attention if decode and tokens == 1 and not fused["gpu"] else 0.0,
                "cpu_row_s": float(sum(matrix_rows(u) * share[u.name] for u in on_cpu if u.kind != "embedding")),
                "cpu_mm_attention_s": float(sum(u.kind in ATTENTION_KINDS for u in on_cpu))
                if decode and tokens == 1 and not fused["cpu"] else 0.0,
                "gpu_graph_warmup_op_s": warmup}

    def rate_bytes(self, model: ModelShape, plan: Plan, machine: MachineSpec, spec: Costs,
                   batch: int = 1) -> dict[str, float]:
        """Bytes per decode step of `batch` sequences the plan's CPU units stream at each of llama.cpp's CPU speeds
        (sim.run.schedule's choice: memory, the last-level cache, the head's own); none on a step that ggml offloads
        (the weights are copied to the GPU instead); the embedding looks rows up and streams none."""
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

    def nonlinear_start(self, runs: list[tuple[ModelShape, MachineSpec, PeerRun]], start: dict,
                        params: tuple[str, ...]) -> dict[str, float]:
        return {"cpu_flops_per_s": multiply_start(runs, start)} if "cpu_flops_per_s" in params else {}


FITTING = LlamacppFitting()


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


def host_scaled(spec: LlamacppCosts, scale: float) -> LlamacppCosts:
    """llama.cpp's costs on a host whose CPU runs its kernels `scale` times as fast as the host they were fitted on
    (LlamacppCosts.scaled)."""
    return spec.scaled(scale)


def fit_host_scale(engine: str, runs: list[tuple[ModelShape, MachineSpec, PeerRun]]) -> float:
    """The CPU scale (host_scaled) that best explains `runs` of the real engine on this host (fit_scalar), bounded
    by HOST_SCALE_BOUNDS. Runs that keep nothing on the CPU do not move it: give at least one that does."""
    spec0 = costs_of(runs[0][1], engine)
    return fit_scalar(engine, runs, lambda x: host_scaled(spec0, x), HOST_SCALE_BOUNDS)
