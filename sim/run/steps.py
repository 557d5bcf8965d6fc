"""The items of a request, step by step: a dense model's columns a step at a time, an MoE's with its router."""
from __future__ import annotations

import numpy as np

from sim.costs.tiers import tier_row
from sim.model.routing import ExpertRouter
from sim.model.shapes import ATTENTION_KINDS, ModelShape
from sim.plan import Plan, Workload
from sim.run.items import COLUMNS, ROW_NAMES, Schedule


def step_shape(w: Workload, static_cache: bool, s: int) -> tuple[int, int]:
    """(new tokens, context) of step s. An engine with a static cache (offloadsim's) attends over all of it (prompt
    + new tokens, masked) at every decode step, so one captured graph serves them all; others over what is written
    so far."""
    if s == 0:
        return w.prompt_tokens, 0
    return 1, w.prompt_tokens + (w.new_tokens - 1 if static_cache else s - 1)


def moe_steps(sch: Schedule, rows: dict, row, compute_time, model: ModelShape, plan: Plan, w: Workload,
               shape_of) -> None:
    """The items of an MoE request: per step, each block's attention then the experts its router picked, a
    streamed expert's load gated by its router (or the previous block's, when the predictor guesses it)."""
    units, t = model.units, plan.tiers()
    router = ExpertRouter(model.n_routed_experts, model.experts_per_token, model.n_blocks, w.expert_skew, w.seed)
    rng = np.random.default_rng(w.seed + 1)
    order = [(ui, -1) if u.expert is None else (ui, u.block) for ui, u in enumerate(units)
             if u.expert is None or u.expert == 0]  # (unit, -1) or (first expert unit of a block, block)
    streamed_expert = [not tier_row(t[u.name].tier).resident or t[u.name].compute == "cpu" for u in units]
    cols = (sch.on_cpu, sch.load, sch.read_bytes, sch.unpack_s, sch.copy_s, sch.copy_bytes, sch.pinned_slot,
            sch.blocking, sch.overhead_s)

    def add(ui: int, s: int, r: tuple, comp: float, gate: int) -> None:
        sch.unit.append(ui)
        sch.step.append(s)
        for col, v in zip(cols, r):
            col.append(v)
        sch.compute_s.append(comp)
        sch.gate.append(gate)

    for s in range(w.new_tokens):
        new, ctx = shape_of(s)
        tokens = w.batch * new
        offload = bool(plan.gpu_offload_min_tokens and tokens >= plan.gpu_offload_min_tokens)
        if offload not in rows:
            rows[offload] = [row(i, offload) for i in range(len(units))]
        rs = rows[offload]
        router_item: dict[int, int] = {}
        for ui, block in order:
            if block < 0:
                if units[ui].kind in ATTENTION_KINDS:
                    router_item[units[ui].block] = len(sch.unit)
                add(ui, s, rs[ui], compute_time(ui, rs[ui][0], w.batch, new, ctx, s), -1)
                continue
            counts = router.draw(block, tokens)
            for n, e in enumerate(np.flatnonzero(counts).tolist()):
                ei = ui + e
                gate = -1
                if streamed_expert[ei]:
                    hit = plan.expert_predictor_hit_rate is not None and rng.random() < plan.expert_predictor_hit_rate
                    gate = router_item.get(block - 1, -1) if hit else router_item[block]
                add(ei, s, rs[ei], compute_time(ei, rs[ei][0], int(counts[e]), 1, 0, s, n == 0), gate)


def dense_steps(sch: Schedule, rows: dict, row, compute_time, n_units: int, w: Workload, plan: Plan,
                 shape_of) -> None:
    """The columns of a dense model's request, a step (every unit, in order, no router gates) at a time."""
    cols: dict[str, list] = {name: [] for name in ROW_NAMES + ("compute_s",)}
    arrays: dict[bool, list[np.ndarray]] = {}
    for s in range(w.new_tokens):
        new, ctx = shape_of(s)
        offload = bool(plan.gpu_offload_min_tokens and w.batch * new >= plan.gpu_offload_min_tokens)
        if offload not in rows:
            rows[offload] = [row(i, offload) for i in range(n_units)]
        if offload not in arrays:
            arrays[offload] = [np.array(c) for c in zip(*rows[offload])]
        a = arrays[offload]
        comp = np.array([compute_time(ui, bool(a[0][ui]), w.batch, new, ctx, s) for ui in range(n_units)],
                        dtype=float)
        for name, col in zip(ROW_NAMES, a):
            cols[name].append(col)
        cols["compute_s"].append(comp)
    for name, parts in cols.items():
        setattr(sch, name, np.concatenate(parts).astype(COLUMNS[name]) if parts else np.zeros(0, COLUMNS[name]))
    sch.unit = np.tile(np.arange(n_units, dtype=np.int64), w.new_tokens)
    sch.step = np.repeat(np.arange(w.new_tokens, dtype=np.int64), n_units)
    sch.gate = np.full(n_units * w.new_tokens, -1, dtype=np.int64)
