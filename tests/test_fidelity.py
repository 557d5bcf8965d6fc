"""The simulator's model pieces on hand-worked values: measured compute grids, copy speed by size, the load phase,
pageable copies that do not overlap compute, CPU contention beside streaming, and offloaded disk units' reads."""
import math

import pytest

from hwmodels.profiles import ComputeGrid, H2DPoint
from sim.costs.compute import GpuKernels, gpu_compute_s, grid_time_s, signature
from sim.run.fast import evaluate
from sim.costs.equations import copy_bytes_per_s
from sim.costs.load import load_time_s
from sim.plan import Budgets, Request, Workload
from sim.run.schedule import build_schedule
from sim.run.simulate import simulate
from tests.toys import BIG, toy_model, toy_plan

ONE = Workload(batch=1, prompt_tokens=1, new_tokens=1)


def grid_for(unit, **kw):
    base = dict(unit=signature(unit, "toy"), device="gpu", batch=(1, 4), prefill_tokens=(10, 20),
                prefill_s=((1.0, 2.0), (3.0, 4.0)), decode_context=(10, 30), decode_s=((0.1, 0.3), (0.2, 0.6)))
    return ComputeGrid(**{**base, **kw})


def test_grid_interpolates_between_measured_points():
    u = toy_model().units[0]
    g = grid_for(u)
    assert grid_time_s(g, 1, 15, 0) == pytest.approx(1.5)          # halfway in tokens
    assert grid_time_s(g, 2, 10, 0) == pytest.approx(1.0 + 2.0 / 3)  # a third of the way in batch
    assert grid_time_s(g, 1, 1, 20) == pytest.approx(0.2)           # decode, halfway in context
    assert grid_time_s(g, 4, 1, 30) == pytest.approx(0.6)


def test_cpu_grid_drops_a_point_faster_than_a_shorter_cache():
    """The Qwen3-14B CPU layer of lab/data/peers/peers-h.json: 15.34 ms at a 20-token cache, 11.08 at 68, 14.57 at 1028, 16.49 at 4100.
    The first two pool to their mean (13.21 ms, under 14.57: the rest stay); a GPU grid is read as measured."""
    u = toy_model().units[0]
    row = (15.34e-3, 11.08e-3, 14.57e-3, 16.49e-3)
    kw = dict(batch=(1,), prefill_tokens=(10, 20, 40), prefill_s=((2.0, 1.0, 3.0),),
              decode_context=(20, 68, 1028, 4100), decode_s=(row,))
    cpu, gpu = grid_for(u, device="cpu", **kw), grid_for(u, **kw)
    assert grid_time_s(cpu, 1, 1, 68) == pytest.approx(13.21e-3)
    assert grid_time_s(cpu, 1, 1, 20) == pytest.approx(13.21e-3)
    assert grid_time_s(cpu, 1, 1, 548) == pytest.approx((13.21e-3 + 14.57e-3) / 2)
    assert grid_time_s(cpu, 1, 1, 4100) == pytest.approx(16.49e-3)
    assert grid_time_s(cpu, 1, 15, 0) == pytest.approx(1.5)            # prefill 2.0, 1.0 pooled to 1.5 each
    assert grid_time_s(gpu, 1, 1, 68) == pytest.approx(11.08e-3)
    assert grid_time_s(gpu, 1, 15, 0) == pytest.approx(1.5)            # GPU: halfway between 2.0 and 1.0 as measured
    assert grid_time_s(gpu, 1, 20, 0) == pytest.approx(1.0)
    assert grid_time_s(cpu, 1, 20, 0) == pytest.approx(1.5)
    assert grid_time_s(grid_for(u, device="cpu"), 1, 1, 20) == pytest.approx(0.2)  # a monotone grid is unchanged


def test_grid_clamps_below_and_scales_above_by_the_roofline():
    u = toy_model().units[0]
    g = grid_for(u)
    assert grid_time_s(g, 1, 1, 2) == pytest.approx(0.1)            # below the smallest context: nearest point
    # above the largest prompt: the last segment (10 -> 20 tokens: 1.0 -> 2.0 s, 10 roofline seconds) continued at
    # 0.1 s per roofline second from 20 to 40 tokens (20 more roofline seconds): 2.0 + 2.0
    assert grid_time_s(g, 1, 40, 0, scale=lambda b, s, k: s - 5.0) == pytest.approx(4.0)
    # an overhead-bound table (flat in context) stays flat however the roofline grows
    flat = grid_for(u, decode_s=((0.3, 0.3), (0.6, 0.6)))
    assert grid_time_s(flat, 1, 1, 300, scale=lambda b, s, k: 1.0 + k) == pytest.approx(0.3)
    # one measured batch: the ratio to the roofline (0.3 s at a roofline of 31 -> 62)
    one = grid_for(u, batch=(1,), prefill_s=((1.0, 2.0),), decode_s=((0.1, 0.3),))
    assert grid_time_s(one, 2, 1, 30, scale=lambda b, s, k: b * (1.0 + k)) == pytest.approx(0.6)


def test_machine_with_a_grid_uses_it_for_matching_units_only(toy_machine):
    m = toy_model()
    u0 = m.units[0]
    machine = toy_machine.model_copy(update={"compute_grids": (grid_for(u0),)})
    assert gpu_compute_s(u0, machine, 1, 15, 0, "toy") == pytest.approx(1.5)
    assert gpu_compute_s(m.units[1], machine, 1, 1, 0, "toy") == pytest.approx(0.8)   # 8 B / 10 B/s roofline
    assert gpu_compute_s(u0, machine, 1, 15, 0, "llama") == pytest.approx(0.4)        # another family: roofline
    sch = build_schedule(m, machine, toy_plan(m, "vram"), ONE, BIG)
    assert sch.compute_sources == {"decoder@gpu": "roofline", "decoder@cpu": "roofline"}  # l1, l2 have no grid
    every = toy_machine.model_copy(update={"compute_grids": tuple(grid_for(u) for u in m.units)})
    sch = build_schedule(m, every, toy_plan(m, "vram"), ONE, BIG)
    assert sch.compute_sources == {"decoder@gpu": "profile", "decoder@cpu": "roofline"}


def test_copy_speed_by_size_is_linear_in_log_size(toy_machine):
    pts = (H2DPoint(nbytes=1, pinned_bytes_per_s=1.0, pageable_bytes_per_s=0.5),
           H2DPoint(nbytes=100, pinned_bytes_per_s=3.0, pageable_bytes_per_s=1.5))
    machine = toy_machine.model_copy(update={"link": toy_machine.link.model_copy(update={"by_size": pts})})
    assert copy_bytes_per_s(10, machine) == pytest.approx(2.0)       # log10(10) is halfway to log10(100)
    assert copy_bytes_per_s(10, machine, pinned=False) == pytest.approx(1.0)
    assert copy_bytes_per_s(1000, machine) == pytest.approx(3.0)     # the end value outside
    assert copy_bytes_per_s(10, toy_machine) == 2.0                  # no table: the link's speed


def test_load_phase_reads_touches_pins_and_copies(toy_machine):
    m = toy_model()                                                   # units of 4, 8 and 2 bytes
    hm = toy_machine.host_memory.model_copy(update={"first_touch_bytes_per_s": 8.0, "pin_bytes_per_s": 4.0})
    machine = toy_machine.model_copy(update={"host_memory": hm})
    plan = toy_plan(m, ["vram", "ram_pinned", "ram_pageable"])
    cold = load_time_s(m, machine, plan, warm=False)
    # reads at 1 B/s: 4 + 8 + 2; fresh pages (not the pinned unit) at 8 B/s: (4 + 2) / 8; pinning 8 B at 4 B/s;
    # the VRAM unit copied from pageable memory at 1 B/s
    assert cold["read_s"] == pytest.approx(14 + 6 / 8)
    assert cold["pin_s"] == pytest.approx(2.0)
    assert cold["copy_s"] == pytest.approx(4.0)
    warm = load_time_s(m, machine, plan, warm=True)
    assert warm["read_s"] == pytest.approx(14 / 4 + 6 / 8)           # the page cache at 4 B/s
    assert load_time_s(m, machine, toy_plan(m, "disk_raw"), warm=False)["total_s"] == pytest.approx(8 * 2 / 4)  # 2 staging slots pinned


def test_pageable_copy_waits_for_the_previous_compute(toy_machine):
    m = toy_model()                                                   # compute 0.4, 0.8, 0.2 s
    res = simulate(m, toy_machine, toy_plan(m, ["vram", "ram_pageable", "ram_pageable"], vram_slots=2), ONE, BIG)
    comp = [(e.unit, e.start_s, e.end_s) for e in res.events if e.stage == "compute"]
    # l1's copy (8 B at 1 B/s) starts when l0 ends at 0.4; l2's copy (2 s) starts when l1 ends at 9.2
    assert comp == [("l0", 0.0, 0.4), ("l1", pytest.approx(8.4), pytest.approx(9.2)),
                    ("l2", pytest.approx(11.2), pytest.approx(11.4))]
    pinned = simulate(m, toy_machine, toy_plan(m, ["vram", "ram_pinned", "ram_pinned"], vram_slots=2), ONE, BIG)
    # pinned copies overlap compute: l1 copies 0-4 s at 2 B/s and computes 4-4.8; l2 copies 4-5 s, computes 5-5.2
    assert [e.end_s for e in pinned.events if e.stage == "compute"] == pytest.approx([0.4, 4.8, 5.2])


def _contention_case(toy_machine, sizes, tiers):
    from sim.plan import Placement
    m = toy_model(sizes)
    slow = toy_machine.model_copy(update={"cpu": toy_machine.cpu.model_copy(update={"copy_contention": 2.0})})
    plan = toy_plan(m, "vram").model_copy(update={"placements": tuple(
        Placement(unit=f"l{k}", tier=t, compute=c) for k, (t, c) in enumerate(tiers))})
    out = []
    for machine in (toy_machine, slow):
        timeline = [(e.unit, e.start_s, e.end_s) for e in simulate(m, machine, plan, ONE, BIG).events
                    if e.stage == "compute"]
        sch = build_schedule(m, machine, plan, ONE, BIG)
        fast = evaluate(sch, plan.prefetch_depth, plan.overlap_copy, plan.vram_slots, plan.pinned_slots)
        assert [t[2] for t in timeline] == pytest.approx(list(fast.c_end), rel=1e-12)  # one model, two engines
        out.append(timeline)
    return out


def test_cpu_compute_slows_only_while_a_copy_runs(toy_machine):
    """Host memory is a shared resource: CPU compute progresses at 1/2 of its speed (copy_contention 2) while the
    copy engine runs, at full speed otherwise. The CPU's toy speed is 5 B/s, the pinned link 2 B/s, the GPU 10 B/s."""
    # l0 (4 B) on the CPU: 0.8 s alone. l1's 1 B copy runs 0-0.5 s beside it: 0.25 s of its work done by 0.5, the
    # other 0.55 s alone: it ends at 1.05 instead of 0.8. l2's copy waits for l1's compute to start (depth 1).
    alone, shared = _contention_case(toy_machine, (4, 1, 2),
                                     (("ram_pageable", "cpu"), ("ram_pinned", "gpu"), ("ram_pinned", "gpu")))
    assert alone[0] == ("l0", 0.0, pytest.approx(0.8))
    assert shared[0] == ("l0", 0.0, pytest.approx(1.05))
    assert shared[2] == ("l2", pytest.approx(2.05), pytest.approx(2.25))  # its 1 s copy from 1.05, 0.2 s compute
    # a copy that starts before the CPU item and ends inside it: l2's 2 B copy runs 0-1 s (the first load, nothing
    # gates it); l1 (4 B on the CPU) starts after l0's 0.4 s on the GPU: 0.6 s beside the copy do 0.3 s of work,
    # the other 0.5 s alone: 0.4 -> 1.5 (0.4 -> 1.2 without contention)
    alone, shared = _contention_case(toy_machine, (4, 4, 2),
                                     (("vram", "gpu"), ("ram_pageable", "cpu"), ("ram_pinned", "gpu")))
    assert alone[1] == ("l1", pytest.approx(0.4), pytest.approx(1.2))
    assert shared[1] == ("l1", pytest.approx(0.4), pytest.approx(1.5))
    # no copy beside it (everything else resident): no slowdown
    alone, shared = _contention_case(toy_machine, (4, 4, 2), (("vram", "gpu"), ("ram_pageable", "cpu"), ("vram", "gpu")))
    assert shared == alone


def test_offloaded_cpu_unit_on_disk_pays_its_read(toy_machine):
    from sim.plan import Placement
    m = toy_model()
    plan = toy_plan(m, "vram", gpu_offload_min_tokens=4).model_copy(update={"placements": (
        Placement(unit="l0", tier="disk_raw", compute="cpu"),) + toy_plan(m, "vram").placements[1:]})
    big_prompt = Workload(batch=1, prompt_tokens=8, new_tokens=2)
    sch = build_schedule(m, toy_machine, plan, big_prompt, BIG)
    assert sch.read_bytes[0] == 4.0 and not sch.on_cpu[0]            # prefill: read from disk, computed on the GPU
    assert sch.read_bytes[3] == 4.0 and sch.on_cpu[3]                # decode: read and computed on the CPU


def test_engine_startup_delays_the_loads(toy_machine):
    m = toy_model()
    eng = toy_machine.engine.model_copy(update={"stream_startup_s": 0.5, "stream_overhead_s": {"ram_pinned": 0.1}})
    machine = toy_machine.model_copy(update={"engine": eng})
    plan = toy_plan(m, ["vram", "ram_pinned", "ram_pinned"], vram_slots=2)
    two = Workload(batch=1, prompt_tokens=1, new_tokens=2)
    sch = build_schedule(m, machine, plan, two, BIG)
    assert list(sch.overhead_s) == pytest.approx([0.0, 0.1, 0.1, 0.0, 0.1, 0.1]) and sch.startup_s == 0.5
    base = simulate(m, toy_machine, plan, ONE, BIG).summary["ttft_s"]
    # base: l1 copies 0-4 and computes 4-4.8, l2 copies 4-5 and computes 5-5.2. Now l1 copies 0.5-4.5 and computes
    # 4.5-5.4 (0.8 + 0.1), l2 copies 4.5-5.5 and computes 5.5-5.8 (0.2 + 0.1)
    assert base == pytest.approx(5.2)
    res = simulate(m, machine, plan, ONE, BIG)
    assert res.summary["ttft_s"] == pytest.approx(5.8)
    from sim.run.simulate import fast_simulate
    assert fast_simulate(m, machine, plan, ONE, BIG)["ttft_s"] == pytest.approx(5.8)


def test_compute_times_are_not_shared_between_units_that_differ_in_kv_or_hidden(toy_machine):
    """Modelling bug 5: the compute cache keyed on (kind, bytes, FLOP params, ...) gave two units that differ only in
    KV bytes and hidden size the same time. Roofline on the toy: bytes touched / 10 B/s."""
    from sim.model.formats import parse_format
    from sim.model.shapes import ModelShape, UnitShape
    base = dict(kind="decoder", matrix_params=2, nbytes=4, flop_params=0, launches=0)
    units = (UnitShape(name="a", block=0, modules=("a",), hidden=0, kv_bytes_per_token=0, **base),
             UnitShape(name="b", block=1, modules=("b",), hidden=1, kv_bytes_per_token=2, **base))
    m = ModelShape(name="t", family="toy", weight_format=parse_format("bf16"), n_blocks=2, hidden=1, vocab=0, units=units)
    sch = build_schedule(m, toy_machine, toy_plan(m, "vram"), ONE, BIG)
    # a: 4 weight bytes -> 0.4 s; b: 4 + KV 2 x 1 token + activations 4 x 1 token x hidden 1 = 10 bytes -> 1.0 s
    assert list(sch.compute_s) == pytest.approx([0.4, 1.0])


def test_graph_grids_price_offloadsims_engine_and_eager_grids_the_peers(toy_machine):
    u0 = toy_model().units[0]
    graph = grid_for(u0, dispatch="graph")                                      # decode at batch 1, context 10: 0.1
    eager = grid_for(u0, dispatch="eager", decode_s=((1.0, 3.0), (2.0, 6.0)))    # the same point launched eagerly: 1.0
    both = toy_machine.model_copy(update={"compute_grids": (eager, graph)})
    assert gpu_compute_s(u0, both, 1, 1, 10, "toy") == pytest.approx(0.1)
    assert gpu_compute_s(u0, both, 1, 1, 10, "toy", GpuKernels(dispatch="eager")) == pytest.approx(1.0)
    only_eager = toy_machine.model_copy(update={"compute_grids": (eager,)})
    assert gpu_compute_s(u0, only_eager, 1, 1, 10, "toy") == pytest.approx(1.0)  # no graph grid: the eager one


def test_offloadsims_decode_attends_over_its_whole_static_cache(toy_machine):
    m = toy_model()
    machine = toy_machine.model_copy(update={"compute_grids": tuple(grid_for(u, dispatch="graph") for u in m.units)})
    w = Workload(batch=1, prompt_tokens=10, new_tokens=11)
    sch = build_schedule(m, machine, toy_plan(m, "vram"), w, BIG)
    decode = [c for c, s, u in zip(sch.compute_s, sch.step, sch.unit) if s > 0 and u == 0]
    # every decode step attends over the cache of 10 + 11 - 1 = 20 positions: halfway from 0.1 (10) to 0.3 (30)
    assert decode == pytest.approx([0.2] * 10)
    peer = build_schedule(m, machine, toy_plan(m, "vram", engine="accelerate"), w, BIG)
    growing = [c for c, s, u in zip(peer.compute_s, peer.step, peer.unit) if s > 0 and u == 0]
    assert growing == pytest.approx([0.1 + 0.01 * k for k in range(10)])   # context 10, 11, ... 19 (a peer's cache)


def test_engine_overhead_idles_the_compute_lane_before_the_kernels(toy_machine):
    m = toy_model()                                                    # units of 4, 8, 2 bytes; compute = bytes / 10
    engine = toy_machine.engine.model_copy(update={"stream_overhead_s": {"ram_pinned": 0.5}, "stream_startup_s": 0.0})
    machine = toy_machine.model_copy(update={"engine": engine})
    res = simulate(m, machine, toy_plan(m, ["vram", "ram_pinned", "vram"]), ONE, BIG)
    comp = next(e for e in res.events if e.stage == "compute" and e.unit == "l1")
    assert comp.duration_s == pytest.approx(0.8)                       # the kernels alone, as the engine times them
    idle = [e for e in res.events if e.stage == "wait" and e.unit == "l1"]
    assert idle[-1].end_s == pytest.approx(comp.start_s) and idle[-1].duration_s == pytest.approx(0.5)


def test_cpu_units_are_priced_by_the_grid_of_the_memory_their_weights_sit_in(toy_machine):
    from sim.costs.compute import cpu_compute_s
    from sim.plan import Placement
    m = toy_model()
    u0 = m.units[0]
    pageable = grid_for(u0, device="cpu", memory="pageable")                                # decode b1 ctx 10: 0.1
    pinned = grid_for(u0, device="cpu", memory="pinned", decode_s=((0.07, 0.21), (0.14, 0.42)))  # the same: 0.07
    both = toy_machine.model_copy(update={"compute_grids": (pinned, pageable)})
    assert cpu_compute_s(u0, both, 1, 1, 10, "toy") == pytest.approx(0.1)
    assert cpu_compute_s(u0, both, 1, 1, 10, "toy", memory="pinned") == pytest.approx(0.07)
    unrecorded = grid_for(u0, device="cpu")                   # an older profile: no memory recorded, read as pageable
    old = toy_machine.model_copy(update={"compute_grids": (pinned, unrecorded)})
    assert cpu_compute_s(u0, old, 1, 1, 10, "toy") == pytest.approx(0.1)
    only_pinned = toy_machine.model_copy(update={"compute_grids": (pinned,)})
    assert cpu_compute_s(u0, only_pinned, 1, 1, 10, "toy") == pytest.approx(0.07)  # the only grid there is
    # in a schedule: the unit's tier decides (decode at batch 1 over a static cache of 9 + 2 - 1 = 10 positions)
    w = Workload(batch=1, prompt_tokens=9, new_tokens=2)
    for tier, want in (("ram_pinned", 0.07), ("ram_pageable", 0.1)):
        plan = toy_plan(m, "vram").model_copy(update={"placements": (Placement(unit=u0.name, tier=tier, compute="cpu"),)
                                                      + toy_plan(m, "vram").placements[1:]})
        sch = build_schedule(m, both, plan, w, BIG)
        assert [c for c, s, u in zip(sch.compute_s, sch.step, sch.unit) if s == 1 and u == 0] == pytest.approx([want])


def test_expected_expert_use_prices_experts_with_the_models_grids(toy_machine):
    """The planner's expected expert use looks grids up by the model's family (it passed none, so an MoE model's
    measured grids were never used there). A flat 0.5 s grid for the expert shape: every expected use costs 0.5 s."""
    import numpy as np

    from planner.options import usage
    m = toy_model(experts=3, top_k=1)
    shapes = {u.nbytes: u for u in m.units if u.expert is not None}   # one expert shape per block size
    flat = {"prefill_s": ((0.5, 0.5), (0.5, 0.5)), "decode_s": ((0.5, 0.5), (0.5, 0.5))}
    grids = tuple(grid_for(e, device=d, **flat) for e in shapes.values() for d in ("gpu", "cpu"))
    machine = toy_machine.model_copy(update={"compute_grids": grids})
    u = usage(Request(m, machine, Workload(batch=2, prompt_tokens=4, new_tokens=3), Budgets.unlimited()))
    experts = np.array([x.expert is not None for x in m.units])
    assert u.uses[experts].sum() > 0
    assert u.gpu_s[experts] == pytest.approx(0.5 * u.uses[experts])
    assert u.cpu_s[experts] == pytest.approx(0.5 * u.uses[experts])


def test_grid_serves_the_same_weights_stored_slightly_differently(toy_machine):
    """A GGUF stores norms as F32, so its layer is a few KB larger than the checkpoint layer the grid was timed on:
    a grid serves units whose bytes are within 1% (the nearest grid when two could), not a quantised layer."""
    m = toy_model((1000, 1004, 1100))
    machine = toy_machine.model_copy(update={"compute_grids": (grid_for(m.units[0]),)})
    assert gpu_compute_s(m.units[1], machine, 1, 15, 0, "toy") == pytest.approx(1.5)        # 0.4% more bytes: the grid
    assert gpu_compute_s(m.units[2], machine, 1, 1, 0, "toy") == pytest.approx(1100 / 10)     # 10% more: the roofline
    near = grid_for(m.units[1], prefill_s=((5.0, 6.0), (7.0, 8.0)))
    both = toy_machine.model_copy(update={"compute_grids": (grid_for(m.units[0]), near)})
    assert gpu_compute_s(m.units[1], both, 1, 10, 0, "toy") == pytest.approx(5.0)


def test_repeated_grid_rounds_give_the_median_and_the_spread():
    """Three rounds whose decode point (b1, ctx 10) read 0.10, 0.12, 0.09 s: the grid keeps 0.10 s; that point's
    spread is (0.12 - 0.09) / 0.10 = 0.3, every other point repeats exactly (spread 0), so the grid's is 0."""
    from validate.compute_grid import median_grids
    u = toy_model().units[0]
    rounds = [[grid_for(u, decode_s=((d, 0.3), (0.2, 0.6)))] for d in (0.10, 0.12, 0.09)]
    (g,) = median_grids(rounds)
    assert g.decode_s == ((0.10, 0.3), (0.2, 0.6)) and g.prefill_s == ((1.0, 2.0), (3.0, 4.0)) and g.spread == 0.0
    noisy = [[grid_for(u, decode_s=((d, 0.3 * k), (0.2, 0.6)))] for d, k in ((0.10, 1.0), (0.12, 1.2), (0.09, 0.9))]
    (g,) = median_grids(noisy)  # two of eight points now spread by 0.3: the median over points is still 0
    assert g.spread == 0.0 and g.decode_s[0] == pytest.approx((0.10, 0.3))
    # every point of three rounds at 0.95x, 1x and 1.05x: each point spreads by 0.10, and so does the grid
    scaled = [[grid_for(u, prefill_s=((k, 2 * k), (3 * k, 4 * k)), decode_s=((0.1 * k, 0.3 * k), (0.2 * k, 0.6 * k)))]
              for k in (1.05, 0.95, 1.0)]
    (g,) = median_grids(scaled)
    assert g.spread == pytest.approx(0.10) and g.prefill_s[1] == pytest.approx((3.0, 4.0))
    with pytest.raises(ValueError, match="same grids"):
        median_grids([[grid_for(u)], [grid_for(u, device="cpu")]])


def test_cpu_grids_interleave_pageable_and_pinned_rounds(monkeypatch):
    """calibrate times the CPU grids pageable, pinned, pageable, pinned, ... and keeps each point's median."""
    import validate.calibrate_compute as cal
    from validate.calibrate_compute import cpu_grids
    u = toy_model().units[0]
    calls = []

    def fake(config, machine, device, memory, **kw):
        calls.append(memory)
        return [grid_for(u, device="cpu", memory=memory, decode_s=((0.1 * len(calls), 0.3), (0.2, 0.6)))]
    monkeypatch.setattr(cal, "measure_grids", fake)
    got = cpu_grids({}, None, {}, 3)
    assert calls == ["pageable", "pinned"] * 3
    assert [(g.memory, g.decode_s[0][0]) for g in got] == [("pageable", pytest.approx(0.3)), ("pinned", pytest.approx(0.4))]


def test_cpu_range_is_a_90pct_interval_from_the_measured_spread(toy_machine):
    """l0 on the CPU from a grid timed in 3 rounds that spread by 20% (0.8 s a step), l1 and l2 on the GPU (0.8 + 0.2
    s by the roofline): 1.8 s per token. Three normal draws span d2(3) = 3 / sqrt(pi) sigma on average, and a fourth
    lies within 1.6449 sigma sqrt(4/3) of their mean 90% of the time: k = 1.6449 x 1.1547 x sqrt(pi) / 3 = 1.1222
    spreads, so the CPU's 0.8 s spans 0.8 x (1 -+ 0.2244) and the token 1.6204-1.9796 s. Timed once (no spread), or
    with nothing on the CPU, there is no range."""
    from sim.analysis.interval import cpu_range, expected_range, interval_factor
    assert expected_range(3) == pytest.approx(3 / math.sqrt(math.pi), rel=1e-6)
    assert expected_range(2) == pytest.approx(2 / math.sqrt(math.pi), rel=1e-6)
    assert interval_factor(3) == pytest.approx(1.6448536 * math.sqrt(4 / 3) * math.sqrt(math.pi) / 3, rel=1e-6)
    from sim.run.simulate import fast_simulate
    m = toy_model((4, 8, 2))
    g = grid_for(m.units[0], device="cpu", prefill_s=((0.8, 0.8), (0.8, 0.8)), decode_s=((0.8, 0.8), (0.8, 0.8)))
    base = toy_plan(m, ["ram_pageable", "vram", "vram"])
    cpu = base.placements[0].model_copy(update={"compute": "cpu"})
    plan = base.model_copy(update={"placements": (cpu, *base.placements[1:])})
    machine = toy_machine.model_copy(update={"compute_grids": (g.model_copy(update={"spread": 0.2}),)})
    assert fast_simulate(m, machine, plan, ONE, BIG)["time_per_token_s"] == pytest.approx(1.8)
    r = cpu_range(m, machine, plan, ONE, BIG)
    k = 1.6448536 * math.sqrt(4 / 3) * math.sqrt(math.pi) / 3
    assert r["spread"] == pytest.approx(0.2) and r["coverage"] == 0.9
    assert r["time_per_token_s"] == pytest.approx((0.8 * (1 - 0.2 * k) + 1.0, 0.8 * (1 + 0.2 * k) + 1.0))
    assert r["time_per_token_s"] == pytest.approx((1.6204, 1.9796), abs=1e-4)
    # half a spread either side (the range before): 0.8 x (1 -+ 0.1) + 1.0
    assert cpu_range(m, machine, plan, ONE, BIG, factor=0.5)["time_per_token_s"] == pytest.approx((1.72, 1.88))
    assert cpu_range(m, toy_machine.model_copy(update={"compute_grids": (g,)}), plan, ONE, BIG) is None
    assert cpu_range(m, machine, toy_plan(m, "vram"), ONE, BIG) is None


def test_graph_replay_pays_less_per_kernel_than_eager_launches(toy_machine):
    """A unit of 10 launches, 4 B at 10 B/s (0.4 s): eager 10 x 10 us more, replayed from a graph 10 x 2 us more, or
    10 x 2.5 us (a quarter of the eager overhead) when the machine does not say."""
    from sim.costs.compute import GpuKernels, gpu_compute_s
    u = toy_model((4,)).units[0].model_copy(update={"launches": 10})
    gpu = toy_machine.gpu.model_copy(update={"kernel_overhead_s": 10e-6, "graph_kernel_overhead_s": 2e-6})
    m = toy_machine.model_copy(update={"gpu": gpu})
    assert gpu_compute_s(u, m, 1, 1, 0, "toy", GpuKernels("eager")) == pytest.approx(0.4 + 100e-6)
    assert gpu_compute_s(u, m, 1, 1, 0, "toy", GpuKernels("graph")) == pytest.approx(0.4 + 20e-6)
    unsaid = m.model_copy(update={"gpu": gpu.model_copy(update={"graph_kernel_overhead_s": None})})
    assert gpu_compute_s(u, unsaid, 1, 1, 0, "toy", GpuKernels("graph")) == pytest.approx(0.4 + 25e-6)


def test_calibrate_reads_the_graph_overhead_off_the_decoder_grid(toy_machine):
    """A decoder graph grid of 0.228 ms for a 436 MB layer at 4.27 TB/s (0.1021 ms) and 40 launches: 3.16 us each."""
    from validate.calibrate_profile import _graph_overhead
    gpu = toy_machine.gpu.model_copy(update={"vram_bytes_per_s": 4.27e12})
    m = toy_machine.model_copy(update={"gpu": gpu})
    grid = {"device": "gpu", "dispatch": "graph", "unit": {"kind": "decoder", "nbytes": 436e6},
            "decode_s": ((0.228e-3, 0.25e-3),)}
    assert _graph_overhead([grid], m, 40) == pytest.approx((0.228e-3 - 436e6 / 4.27e12) / 40)
    assert _graph_overhead([dict(grid, dispatch="eager")], m, 40) is None


def test_cpu_prompt_past_the_grid_is_read_as_more_sequences_of_its_longest():
    """A CPU grid measured to 64-token prompts at batch 1, 4 and 16: one 128-token prompt holds the tokens of two
    64-token prompts, so it costs the batch-2 point of the 64 column (a third of the way from batch 1 to 4). Past the
    batch axis the 64 column continues along its last segment; on the GPU the prompt axis continues along the
    roofline."""
    u = toy_model().units[0]
    kw = dict(batch=(1, 4, 16), prefill_tokens=(16, 64), prefill_s=((6.0, 9.0), (9.0, 21.0), (21.0, 75.0)),
              decode_context=(20, 68), decode_s=((5.0, 5.0), (6.0, 6.0), (7.0, 7.0)))
    cpu, gpu = grid_for(u, device="cpu", **kw), grid_for(u, **kw)
    roof = lambda b, s, k: b * s  # noqa: E731  (a roofline linear in tokens)
    assert grid_time_s(cpu, 1, 128, 0, roof) == pytest.approx(9.0 + (21.0 - 9.0) / 3)
    assert grid_time_s(cpu, 4, 256, 0, roof) == pytest.approx(75.0)              # 16 prompts of 64
    # GPU: the 64-token column continued along the roofline (k = (9 - 6) / (64 - 16) per roofline second)
    assert grid_time_s(gpu, 1, 128, 0, roof) == pytest.approx(9.0 + 3.0 / 48 * 64)
    # 16 x 128 tokens are 32 prompts of 64, past the batch axis: the 64 column continued along its last segment
    # (21 s at 4 to 75 s at 16: 4.5 s a sequence)
    assert grid_time_s(cpu, 16, 128, 0, roof) == pytest.approx(75.0 + 16 * 4.5)
    assert grid_time_s(cpu, 1, 64, 0, roof) == pytest.approx(9.0)                 # inside the grid: as measured
    # attention quadratic in the prompt: 1 x 128 tokens cost 128 + 128^2/64 = 384 roofline seconds against 2 x 64
    # tokens' 2 x (64 + 64^2/64) = 256, so the batch-2 point's time counts 1.5 times
    quad = lambda b, s, k: b * s + b * s * s / 64  # noqa: E731
    assert grid_time_s(cpu, 1, 128, 0, quad) == pytest.approx((9.0 + (21.0 - 9.0) / 3) * 1.5)


def test_long_prompts_must_lie_past_the_grid_with_one_time_each():
    u = toy_model().units[0]
    with pytest.raises(ValueError, match="long_prompts"):
        grid_for(u, device="cpu", long_prompts=(20,), long_prefill_s=(1.0,))        # not past the grid's 20
    with pytest.raises(ValueError, match="long_prompts"):
        grid_for(u, device="cpu", long_prompts=(40, 80), long_prefill_s=(1.0,))
