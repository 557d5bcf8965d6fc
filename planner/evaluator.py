"""Score many assignments quickly: the simulator's schedule built once per request, then re-columned per plan.

An assignment is an int array (one OPTIONS index per unit) with loader settings (prefetch depth, VRAM slots, pinned
slots, GPU offload threshold). The item order and the compute times do not depend on the plan (expert draws are
seeded by the workload), so two `build_schedule` calls (every unit on the GPU, every unit on the CPU) give all of
them; each plan then only picks columns. The memory accounting is `sim.costs.memory`'s own (`held_bytes`, `account`,
`shortfall`, the rules `memory_use` applies), and the timing is `sim.run.fast.evaluate` itself;
tests/test_planner_properties.py checks the result against `fast_simulate`, tests/test_tiers.py the memory.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from planner.choices import OPTIONS
from sim.costs.compute import has_pinned_cpu_grid
from sim.costs.memory import (HeldBytes, Loader, MemoryUse, account, activation_bytes, held_bytes, shortfall,
                              unit_bytes)
from sim.costs.tiers import TIER_ROWS, TIERS
from sim.costs.transfer import Codec, copy_time_s, pin_time_s, read_time_s
from sim.run.fast import evaluate
from sim.analysis.metrics import step_times, summary
from sim.plan import Budgets, Placement, Plan, Request, Workload
from sim.run.items import COLUMNS, Schedule
from sim.run.schedule import build_schedule
from sim.engines.offloadsim.kv import link_at_s, offload_kv_move_s
from sim.model.shapes import ModelShape, UnitShape
from sim.run.reads import warm_contents

Settings = tuple[int, int, int, int | None]   # (prefetch depth, VRAM slots, pinned slots, gpu_offload_min_tokens)
TIER_CODE = np.array([TIERS.index(t) for t, _ in OPTIONS])   # each option's row in TIERS
ON_CPU = np.array([d == "cpu" for _, d in OPTIONS])
IN_VRAM = np.array([TIER_ROWS[t].resident for t, _ in OPTIONS])
COMPRESSED = np.array([TIER_ROWS[t].compressed for t, _ in OPTIONS])
PINNED = np.array([TIER_ROWS[t].pinned_home for t, _ in OPTIONS])
ROW_COLUMNS = [c for c in COLUMNS if c not in ("unit", "step", "compute_s", "gate", "link_at_s")]
STAGED = np.array([TIER_ROWS[t].staged for t, _ in OPTIONS])
PACKED = np.array([TIER_ROWS[t].packed_reads for t, _ in OPTIONS])
OBJECTIVES = ("request", "total", "token")


def objective_value(objective: str, time_per_token_s: float, total_s: float, load_s: float) -> float:
    """What the planner minimises: 'request' the time to finish the request from a cold engine (the load before the
    first token, sim.costs.load, plus the request's total), 'total' the request's total without the load, 'token'
    the time per output token (ties to the shorter total)."""
    if objective == "token":
        return time_per_token_s + 1e-9 * total_s
    return total_s if objective == "total" else load_s + total_s


class Evaluator:
    """Scores (assignment, settings) for one request (model, machine, workload, budgets) and codec; counts its
    evaluations."""

    def __init__(self, req: Request, codec: Codec | None, like: Evaluator | None = None):
        """`like`: an evaluator of the same model, machine and codec (another workload or budgets), whose parts that
        depend on neither (the all-GPU and all-CPU plans, the per-size rows) are reused."""
        self.req, self.codec = req, codec
        self.model, self.machine, self.w, self.budgets = req.model, req.machine, req.workload, req.budgets
        self.plans: dict[tuple[str, str], Plan] = like.plans if like else {}
        gpu, cpu = self._all_on("gpu"), self._all_on("cpu")
        self.sched_gpu = gpu
        self.unit, self.step = gpu.unit, gpu.step
        self.comp = np.stack([gpu.compute_s, cpu.compute_s])           # [on_cpu, item]
        # a CPU unit in pinned RAM is priced by the pinned CPU grid where the machine has one (as build_schedule)
        self.comp_pinned = self._all_on("cpu", "ram_pinned").compute_s if has_pinned_cpu_grid(req.machine) else None
        self.router_gate = gpu.gate                                     # every expert streamed: its router item
        units = req.model.units
        self.bytes = unit_bytes(req.model, req.workload)   # the memory accounting's view of the units
        self.nb, self.nb_int = self.bytes.nbytes.astype(float), self.bytes.nbytes
        self.is_expert = np.array([u.expert is not None for u in units])
        self.is_embedding = self.bytes.embedding
        self.act_bytes = activation_bytes(req.model, req.workload)
        self.fixed_vram = int(self.bytes.kv.sum()) + self.act_bytes  # the most: every layer computed on the GPU
        self.tokens = np.array([self.w.batch * (self.w.prompt_tokens if s == 0 else 1) for s in range(self.w.new_tokens)])
        self.kv_move, self.kv_link_at = self._kv_moves()
        # one flat table per column over (offload, option, unit): an item's value is one take
        self.flat = like.flat if like else self._flat()
        # the items' steps as runs of one step: a step's end is the latest end of its runs (sim.analysis.metrics.step_times)
        self.runs = np.flatnonzero(np.r_[True, self.step[1:] != self.step[:-1]])
        self.run_steps = Schedule(step=self.step[self.runs], n_steps=gpu.n_steps)
        self.load_unit = self._load_table()
        self.evaluations = 0
        self._last: tuple = (b"", None)
        self._columns: tuple = (b"", {})

    def _kv_moves(self) -> tuple[np.ndarray, np.ndarray]:
        """Per item: a CPU-option unit multiplied on the GPU for a big step moves its cache
        (sim.run.schedule.offload_kv_move_s), and when its first transfer needs the link (link_at_s)."""
        moves: dict[tuple[int, int], tuple[float, float]] = {}
        units, m, w = self.model.units, self.machine, self.w
        for ui, st in zip(self.unit.tolist(), self.step.tolist()):
            if (ui, st) not in moves:
                moves[ui, st] = (offload_kv_move_s(units[ui], m, w, st), link_at_s(units[ui], m, w, st))
        return np.array([moves[k] for k in zip(self.unit.tolist(), self.step.tolist())],
                        dtype=float).reshape(-1, 2).T

    def _load_table(self) -> np.ndarray:
        """Per (option, unit): the seconds the unit adds to sim.costs.load.load_time_s (read once and touched, pinned,
        or copied to VRAM), the same terms per unit; the staging buffers are added per plan (`load_s`)."""
        m, ratio = self.machine, self.codec.ratio if self.codec else 1.0
        touch = m.host_memory.first_touch_bytes_per_s
        sizes, inverse = np.unique(self.nb_int, return_inverse=True)
        out = np.zeros((len(OPTIONS), len(self.nb)))
        for j, (tier, _) in enumerate(OPTIONS):
            row = TIER_ROWS[tier]
            per = np.zeros(len(sizes))
            for k, b in enumerate(sizes.tolist()):
                if not row.reads_storage:
                    stored = row.stored(b, ratio)
                    per[k] += read_time_s(stored, m, self.w.warm) + (stored / touch if not row.pinned_home else 0.0)
                if row.pinned_home:
                    per[k] += pin_time_s(b, m)
                if row.resident:
                    per[k] += copy_time_s(b, m, pinned=False)
            out[j] = per[inverse.ravel()]
        return out

    def load_s(self, assign: np.ndarray, s: Settings) -> float:
        """sim.costs.load.load_time_s(...)['total_s'] of the plan: the seconds before the first token that place its
        weights."""
        slots = max(s[2], 1)
        staged, packed = STAGED[assign], PACKED[assign]
        ratio = self.codec.ratio if self.codec else 1.0
        t = float(self.load_unit[assign, np.arange(len(assign))].sum())
        if staged.any():
            t += pin_time_s(float(self.nb_int[staged].max()) * slots, self.machine)
        if packed.any():
            t += float(self.nb_int[packed].max()) * ratio * slots / self.machine.host_memory.first_touch_bytes_per_s
        return t

    def _all_on(self, device: str, tier: str = "ram_pageable") -> Schedule:
        """The schedule of the plan with every unit in `tier`, computed on `device`."""
        if (device, tier) not in self.plans:  # model_construct: valid by construction, and faster
            placements = tuple(Placement.model_construct(unit=u.name, tier=tier, compute=device)
                               for u in self.model.units)
            self.plans[device, tier] = Plan(model=self.model.name, machine=self.machine.name, placements=placements,
                                            prefetch_depth=0, vram_slots=1)
        return build_schedule(self.model, self.machine, self.plans[device, tier], self.w, Budgets.unlimited())

    def _flat(self) -> dict[str, np.ndarray]:
        rows = {off: self._rows(off) for off in (False, True)}
        return {c: np.stack([rows[False][c], rows[True][c]]).ravel() for c in ROW_COLUMNS}

    def _rows(self, offload: bool) -> dict[str, np.ndarray]:
        """Per (option, unit): the step-invariant columns of sim.run.schedule, read off schedules of a stand-in model
        with one dense unit per distinct size (the columns depend only on the size, the option and the offload)."""
        sizes, inverse = np.unique(self.nb_int, return_inverse=True)
        units = tuple(UnitShape(name=f"s{i}", kind="decoder", block=i, modules=(f"s{i}",), matrix_params=int(b) // 2,
                                nbytes=int(b), flop_params=0, hidden=0, launches=0) for i, b in enumerate(sizes))
        stand_in = ModelShape(name="sizes", family=self.model.family, weight_format=self.model.weight_format,
                              n_blocks=len(units), hidden=0, vocab=0, units=units)
        w = Workload(batch=1, prompt_tokens=1, new_tokens=1)
        out = {c: np.zeros((len(OPTIONS), len(self.nb)), dtype=COLUMNS[c]) for c in ROW_COLUMNS}
        for j, (tier, dev) in enumerate(OPTIONS):
            placements = tuple(Placement(unit=u.name, tier=tier, compute=dev) for u in units)
            plan = Plan(model="sizes", machine=self.machine.name, placements=placements, vram_slots=1, pinned_slots=1,
                        codec=self.codec, gpu_offload_min_tokens=1 if offload else None)
            if TIER_ROWS[tier].compressed and self.codec is None:
                continue
            sch = build_schedule(stand_in, self.machine, plan, w, Budgets.unlimited())
            for c in ROW_COLUMNS:
                out[c][j] = np.asarray(getattr(sch, c))[inverse]
        return out

    def held(self, assign: np.ndarray) -> HeldBytes:
        """sim.costs.memory.held_bytes of an assignment (kept for the last one: the loader settings vary most)."""
        key = assign.tobytes()
        if self._last[0] != key:
            ratio = self.codec.ratio if self.codec else 1.0
            self._last = (key, held_bytes(self.bytes, TIER_CODE[assign], ON_CPU[assign], ratio))
        return self._last[1]

    def memory(self, assign: np.ndarray, s: Settings) -> MemoryUse | None:
        """sim.costs.memory.memory_use for this assignment, or None when it exceeds a budget (or places a unit in a
        compressed tier without a codec)."""
        if self.codec is None and COMPRESSED[assign].any():
            return None
        loader = Loader(s[1], s[2], bool(s[3] and self.tokens[0] >= s[3]))
        m = account(self.held(assign), loader, self.act_bytes, self.budgets.ram_bytes)
        return m if shortfall(m, self.budgets) is None else None

    def columns(self, assign: np.ndarray, offload: int | None) -> dict[str, np.ndarray]:
        """The plan's per-item columns; they depend on the assignment and the offload threshold only, so they are
        kept for the last assignment (the loader settings vary most). Read only: schedules share them."""
        key = assign.tobytes()
        off_step = (self.tokens >= offload) if offload else np.zeros(len(self.tokens), bool)
        if self._columns[0] != key:
            self._columns = (key, {})
        got = self._columns[1].get(off_step.tobytes())
        if got is None:
            off = off_step[self.step] & ~self.is_embedding[self.unit]  # a CPU embedding is never offloaded
            n_opt, n_unit = len(OPTIONS), len(self.nb)
            idx = (off * n_opt + assign[self.unit]) * n_unit + self.unit
            got = {c: self.flat[c].take(idx) for c in ROW_COLUMNS}
            streamed_expert = self.is_expert & (~IN_VRAM[assign] | ON_CPU[assign])
            got["gate"] = np.where(streamed_expert[self.unit], self.router_gate, -1)
            moved = ON_CPU[assign][self.unit] & ~got["on_cpu"]
            comp = np.where(got["on_cpu"], self.comp[1], self.comp[0] + np.where(moved, self.kv_move, 0.0))
            got["link_at_s"] = np.where(moved, self.kv_link_at, -1.0)
            if self.comp_pinned is not None:
                comp = np.where(got["on_cpu"] & PINNED[assign][self.unit], self.comp_pinned, comp)
            got["compute_s"] = comp
            self._columns[1][off_step.tobytes()] = got
        return got

    def schedule(self, assign: np.ndarray, s: Settings, mem: MemoryUse) -> Schedule:
        """The schedule sim.run.schedule.build_schedule would lay out for this plan (same columns, same order)."""
        sch = dataclasses.replace(self.sched_gpu, unit=self.unit, step=self.step, memory=mem,
                                  cache_capacity_bytes=mem.page_cache_bytes, warm_keys=[], **self.columns(assign, s[3]))
        if self.w.warm:
            sch.warm_keys = warm_contents(sch)
        return sch

    def run(self, assign: np.ndarray, s: Settings):
        mem = self.memory(assign, s)
        if mem is None:
            return None
        self.evaluations += 1
        sch = self.schedule(assign, s, mem)
        return sch, evaluate(sch, s[0], True, s[1], s[2])

    def times(self, assign: np.ndarray, s: Settings) -> tuple[float, float, float] | None:
        """(ttft_s, time_per_token_s, total_s), or None when over a budget."""
        out = self.run(assign, s)
        return None if out is None else step_times(self.run_steps, np.maximum.reduceat(out[1].c_end, self.runs))

    def summary(self, assign: np.ndarray, s: Settings) -> dict | None:
        """sim.run.simulate.fast_simulate's summary for this plan."""
        out = self.run(assign, s)
        if out is None:
            return None
        sch, r = out
        got = summary(sch, r.c_start, r.c_end, sch.memory, r.cache_hits, r.cache_misses)
        got["load_s"] = self.load_s(assign, s)
        return got

    def plan(self, assign: np.ndarray, s: Settings, policy: str = "planner") -> Plan:
        placements = tuple(Placement(unit=u.name, tier=OPTIONS[j][0], compute=OPTIONS[j][1])
                           for u, j in zip(self.model.units, assign.tolist()))
        return Plan(model=self.model.name, machine=self.machine.name, policy=policy, placements=placements,
                    prefetch_depth=s[0], vram_slots=s[1], pinned_slots=s[2], codec=self.codec,
                    gpu_offload_min_tokens=s[3])


def assignment_of(plan: Plan) -> np.ndarray | None:
    """The OPTIONS indices of a plan's placements (None if a placement is not an option)."""
    index = {o: j for j, o in enumerate(OPTIONS)}
    out = [index.get((p.tier, p.compute)) for p in plan.placements]
    return None if any(j is None for j in out) else np.array(out, dtype=np.int64)


def settings_of(plan: Plan) -> Settings:
    return (plan.prefetch_depth, plan.vram_slots, plan.pinned_slots, plan.gpu_offload_min_tokens)


def is_planner_runtime(plan: Plan) -> bool:
    """The plan uses the runtime the Evaluator models (overlapped copies, pinned staging, one reader, no predictor)."""
    return plan.overlap_copy and plan.pinned_staging and plan.reader_threads == 1 and plan.expert_predictor_hit_rate is None
