"""Per-unit placement options and their costs over a whole request, grouped for the integer program.

An option is (tier, compute device). Its cost is the work it puts on each resource over the request (compute,
link, disk, unpack) and the memory it takes (VRAM, pinned, RAM, page cache). Units with identical costs form a group.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from sim.costs.tiers import TIER_ROWS
from sim.costs.transfer import Codec, copy_time_s, unpack_time_s
from sim.costs.memory import unit_kv_bytes
from sim.plan import Budgets, Request, Workload
from sim.model.shapes import ModelShape, UnitShape
from sim.costs.compute import cpu_compute_s, gpu_compute_s, has_pinned_cpu_grid
from sim.model.routing import ExpertRouter
from planner.choices import OPTIONS
from planner.evaluator import Evaluator

RESOURCES = ("compute", "copy", "read", "unpack")


@dataclass(frozen=True)
class Usage:
    """How often each unit runs and its compute time on each device, over a phase of the request."""
    uses: np.ndarray          # steps in which the unit runs
    gpu_s: np.ndarray         # total GPU compute seconds
    cpu_s: np.ndarray         # total CPU compute seconds


def usage(req: Request, phase: str = "all", ev=None) -> Usage:
    """From the simulator's own schedule (same expert draws), every unit computed on the GPU, then on the CPU, for the
    request's model, machine and workload (its budgets play no part).
    phase: 'all' (the whole request) or 'decode' (per decode step: steps 1.. divided by their number).
    `ev`: a planner.evaluator.Evaluator for this request, whose schedules are reused."""
    model, w = req.model, req.workload
    if ev is None:
        ev = Evaluator(req.replace(budgets=Budgets.unlimited()), None)
    n = len(model.units)
    keep = ev.step >= (1 if phase == "decode" and w.new_tokens > 1 else 0)
    scale = max(w.new_tokens - 1, 1) if phase == "decode" else 1
    uses = np.bincount(ev.unit[keep], minlength=n) / scale
    # a CPU unit's time: the faster of its pageable and pinned grids (so the bound holds for either tier)
    cpu = ev.comp[1] if ev.comp_pinned is None else np.minimum(ev.comp[1], ev.comp_pinned)
    gpu_s, cpu_s = (np.bincount(ev.unit[keep], weights=c[keep], minlength=n) / scale for c in (ev.comp[0], cpu))
    use = Usage(uses=uses, gpu_s=gpu_s, cpu_s=cpu_s)
    if model.is_moe:  # plan on expected expert use, not on the draws the evaluation will see
        use = _expected_expert_use(req, phase, Usage(uses.copy(), gpu_s.copy(), cpu_s.copy()))
    return use


class _ExpertTimes:
    """Compute seconds of an expert on either device, memoised by shape and token count (the experts of a model
    share a few)."""

    def __init__(self, req: Request):
        self.machine, self.family = req.machine, req.model.family
        self.times: dict[tuple, float] = {}

    def gpu(self, u: UnitShape, shape: tuple, tokens: int) -> float:
        key = (shape, tokens, "gpu")
        if key not in self.times:
            self.times[key] = gpu_compute_s(u, self.machine, tokens, 1, 0, self.family)
        return self.times[key]

    def cpu(self, u: UnitShape, shape: tuple, tokens: int, m: str) -> float:
        key = (shape, tokens, m)
        if key not in self.times:
            self.times[key] = cpu_compute_s(u, self.machine, tokens, 1, 0, self.family, m)
        return self.times[key]


def _expected_expert_use(req: Request, phase: str, use: Usage) -> Usage:
    """`use` with each routed expert's uses and compute seconds replaced by their expectations under the router's
    pick probabilities (in place: `use` holds copies)."""
    model, w = req.model, req.workload
    uses, gpu_s, cpu_s = use.uses, use.gpu_s, use.cpu_s
    router = ExpertRouter(model.n_routed_experts, model.experts_per_token, model.n_blocks, w.expert_skew)
    decode_steps = max(w.new_tokens - 1, 0)
    mems = ("pageable", "pinned") if has_pinned_cpu_grid(req.machine) else ("pageable",)  # the faster, for the bound
    probability = functools.lru_cache(maxsize=None)(router.pick_probability)
    t = _ExpertTimes(req)
    for i, u in enumerate(model.units):
        if u.expert is None:
            continue
        shape = _shape(u)
        q = probability(u.block)[u.expert]
        p_dec = 1 - (1 - q) ** w.batch
        p_pre = 1 - (1 - q) ** (w.batch * w.prompt_tokens)
        tok_pre = max(1, round(w.batch * w.prompt_tokens * q))
        if phase == "decode":
            n_dec, n_pre = p_dec, 0.0
        else:
            n_dec, n_pre = decode_steps * p_dec, p_pre
        uses[i] = n_dec + n_pre
        gpu_s[i] = n_dec * t.gpu(u, shape, 1) + n_pre * t.gpu(u, shape, tok_pre)
        cpu_s[i] = min(n_dec * t.cpu(u, shape, 1, m) + n_pre * t.cpu(u, shape, tok_pre, m) for m in mems)
    return use


# what a unit's compute time can depend on: every field but where the unit sits (sim.costs.compute reads none of those)
SHAPE_FIELDS = tuple(f for f in UnitShape.model_fields if f not in ("name", "block", "expert", "modules"))


def _shape(u: UnitShape) -> tuple:
    d = u.__dict__
    return tuple(d[f] for f in SHAPE_FIELDS)


def per_size(nb: np.ndarray, f, *args, **kw) -> np.ndarray:
    """[f(b, *args, **kw) for b in nb], calling f once per distinct size (15,000 experts share a few)."""
    sizes, inverse = np.unique(nb, return_inverse=True)
    return np.array([f(b, *args, **kw) for b in sizes])[inverse.ravel()]


@dataclass(frozen=True)
class OptionCosts:
    """Arrays indexed [unit, option]: resource seconds over the request and memory bytes; `allowed` masks options."""
    work: dict[str, np.ndarray]
    vram: np.ndarray
    pinned: np.ndarray
    ram: np.ndarray
    disk: np.ndarray
    allowed: np.ndarray
    nbytes: np.ndarray


def option_costs(req: Request, use: Usage, codec: Codec | None, cached: bool, phase: str = "all") -> OptionCosts:
    """Each option's costs for every unit of the request's model on its machine and workload. `cached`: disk reads
    after the first hit the page cache (the plan must then fit its disk units in it)."""
    model, machine, w = req.model, req.machine, req.workload
    nb = np.array([u.nbytes for u in model.units], dtype=float)
    n, k = len(nb), len(OPTIONS)
    st = machine.storage
    uses = use.uses.astype(float)
    ratio = codec.ratio if codec else 1.0
    first_cold = 0.0 if (w.warm or phase == "decode") else 1.0
    reads_cold = np.minimum(uses, first_cold) if cached else uses
    reads_warm = uses - reads_cold

    def read_s(stored: np.ndarray) -> np.ndarray:
        return reads_cold * (st.request_latency_s + stored / st.cold_read_bytes_per_s) + \
            reads_warm * (st.request_latency_s + stored / st.cache_read_bytes_per_s)

    work = {r: np.zeros((n, k)) for r in RESOURCES}
    vram, pinned, ram, disk = (np.zeros((n, k)) for _ in range(4))
    allowed = np.ones((n, k), dtype=bool)
    copy_pin = uses * per_size(nb, copy_time_s, machine, pinned=True)
    copy_page = uses * per_size(nb, copy_time_s, machine, pinned=False)
    for j, (tier, dev) in enumerate(OPTIONS):
        row = TIER_ROWS[tier]
        work["compute"][:, j] = use.gpu_s if dev == "gpu" else use.cpu_s
        if dev == "gpu" and not row.resident:  # the planner's runtime stages through pinned slots
            work["copy"][:, j] = copy_pin if row.copies_pinned(staging=True) else copy_page
        if row.reads_storage:
            stored = nb * (ratio if row.compressed else 1.0)
            work["read"][:, j] = read_s(stored)
            disk[:, j] = stored
        if row.unpacks:
            if codec is None:
                allowed[:, j] = False
                continue
            work["unpack"][:, j] = uses * per_size(nb, unpack_time_s, codec)
        vram[:, j] = nb if row.resident else 0
        pinned[:, j] = nb if row.pinned_home else 0
        if dev == "cpu" and row.pinned_home:
            allowed[:, j] = False  # same cost as pageable for the CPU; kept for llama.cpp-style plans
        ram[:, j] = row.stored(nb, ratio) if row.home == "pageable" else 0
    add_kv_cache(model, w, vram, ram)
    return OptionCosts(work, vram, pinned, ram, disk, allowed, nb)


def add_kv_cache(model: ModelShape, w: Workload, vram: np.ndarray, ram: np.ndarray) -> None:
    """Each unit's KV cache, in place: in VRAM for the options that compute it on the GPU, in RAM for the CPU's
    (as sim.costs.memory.account counts it; the prompt's copy of a CPU layer's cache to the GPU is left to the evaluator)."""
    kv = np.array(unit_kv_bytes(model, w), dtype=float)
    on_gpu = np.array([dev == "gpu" for _, dev in OPTIONS])
    vram[:, on_gpu] += kv[:, None]
    ram[:, ~on_gpu] += kv[:, None]


def groups(costs: OptionCosts) -> list[np.ndarray]:
    """Units whose cost rows are identical (to 1e-9 relative), as index arrays in model order."""
    rows = np.concatenate([costs.work[r] for r in RESOURCES] + [costs.vram, costs.ram, costs.disk,
                                                                 costs.allowed.astype(float)], axis=1)
    scale = np.maximum(np.abs(rows).max(axis=0), 1e-30)
    keys = np.round(rows / scale, 9) + 0.0   # + 0.0: -0.0 becomes 0.0, so equal values have equal bits
    first, inverse = row_classes(keys)
    return [np.flatnonzero(inverse == g) for g in np.argsort(first)]


def row_classes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a float array grouped by their bits: (each class's first row, each row's class), as np.unique
    gives them, with the classes in some order. Rows are hashed (a sort of one number per row, not of 15,000 rows
    of 80 numbers) and rows of one hash are checked equal; on a collision, np.unique decides."""
    bits = np.ascontiguousarray(rows, dtype=np.float64).view(np.uint64)
    mult = np.random.default_rng(0).integers(1, 2**63, size=bits.shape[1], dtype=np.uint64)
    _, first, inverse = np.unique((bits * mult).sum(axis=1), return_index=True, return_inverse=True)
    if not (bits == bits[first[inverse]]).all():
        _, first, inverse = np.unique(bits.view(np.dtype((np.void, bits.strides[0]))).ravel(), return_index=True,
                                      return_inverse=True)
    return first, inverse.ravel()
