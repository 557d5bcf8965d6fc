"""Invariants of the timeline (hypothesis) and the fast evaluator's agreement with SimPy."""
import pytest
from hypothesis import given, settings, strategies as st

from sim.costs.equations import Codec
from sim.run.fast import Unsupported, evaluate
from sim.plan import Budgets, Workload
from sim.run.schedule import build_schedule
from sim.run.simulate import fast_simulate, simulate
from tests.conftest import TOY
from tests.toys import BIG, toy_model, toy_plan

TIERS = ["vram", "ram_pinned", "ram_pageable", "ram_compressed", "disk_raw", "disk_compressed"]
CPU_TIERS = ("ram_pinned", "ram_pageable", "disk_raw")  # what a CPU-computed unit may be stored in


@st.composite
def cases(draw, moe=True):
    n = draw(st.integers(1, 5))
    sizes = tuple(draw(st.lists(st.integers(1, 64), min_size=n, max_size=n)))
    experts = draw(st.sampled_from([0, 0, 3])) if moe else 0
    model = toy_model(sizes, experts=experts, top_k=1 if experts else 0)
    tiers = draw(st.lists(st.sampled_from(TIERS), min_size=len(model.units), max_size=len(model.units)))
    slots = draw(st.integers(1, 3))
    plan = toy_plan(model, tiers, prefetch_depth=draw(st.integers(0, 3)), vram_slots=slots,
                    pinned_slots=draw(st.integers(1, 3)), overlap_copy=draw(st.booleans()),
                    pinned_staging=draw(st.booleans()), codec=Codec(ratio=0.6, unpack_bytes_per_s=draw(st.sampled_from([1.0, 3.0, 50.0]))),
                    expert_predictor_hit_rate=draw(st.sampled_from([None, 0.5])))
    w = Workload(batch=draw(st.integers(1, 3)), prompt_tokens=draw(st.integers(1, 4)), new_tokens=draw(st.integers(1, 4)),
                 warm=draw(st.booleans()), seed=draw(st.integers(0, 5)))
    ram = model.total_bytes + 3 * max(sizes) + draw(st.integers(0, 300))  # the rest is page cache
    return model, plan, w, Budgets(vram_bytes=10**6, ram_bytes=ram, pinned_bytes=ram)


@settings(max_examples=150, deadline=None)
@given(cases())
def test_fast_evaluator_equals_simpy(case):
    model, plan, w, b = case
    res = simulate(model, TOY, plan, w, b)
    sch = build_schedule(model, TOY, plan, w, b)
    fast = evaluate(sch, plan.prefetch_depth, plan.overlap_copy, plan.vram_slots, plan.pinned_slots)
    for a, c in zip(fast.c_end, res.c_end):
        assert abs(a - c) <= 1e-9 * max(1.0, abs(c))
    f = fast_simulate(model, TOY, plan, w, b)
    assert f["time_per_token_s"] == pytest.approx(res.summary["time_per_token_s"], rel=1e-9, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(cases(), st.data(), st.sampled_from([1.0, 1.5, 3.0]), st.sampled_from([None, 1, 3]), st.sampled_from([0, 2]))
def test_fast_evaluator_equals_simpy_with_cpu_units_and_contention(case, data, factor, offload, kv):
    """Units computed on the CPU (from RAM or disk), slowed while copies run (host memory shared with the copier);
    with an offload threshold, multiplied on the GPU for big steps, their cache moved over the link (kv bytes a
    token: a transfer that waits for the copies queued before it)."""
    from sim.plan import Placement
    model, plan, w, b = case
    model = model.model_copy(update={"units": tuple(u.model_copy(update={"kv_bytes_per_token": kv})
                                                    if u.expert is None else u for u in model.units)})
    b = b.model_copy(update={"ram_bytes": b.ram_bytes + 1000 * kv})  # the CPU layers' cache lives in RAM
    on_cpu = data.draw(st.lists(st.booleans(), min_size=len(model.units), max_size=len(model.units)))
    plan = plan.model_copy(update={"gpu_offload_min_tokens": offload, "placements": tuple(
        Placement(unit=p.unit, tier=p.tier, compute="cpu" if c and p.tier in CPU_TIERS else "gpu")
        for p, c in zip(plan.placements, on_cpu))})
    machine = TOY.model_copy(update={"cpu": TOY.cpu.model_copy(update={"copy_contention": factor})})
    res = simulate(model, machine, plan, w, b)
    sch = build_schedule(model, machine, plan, w, b)
    fast = evaluate(sch, plan.prefetch_depth, plan.overlap_copy, plan.vram_slots, plan.pinned_slots)
    for a, c in zip(fast.c_end, res.c_end):
        assert abs(a - c) <= 1e-9 * max(1.0, abs(c))
    if factor > 1.0:  # never faster than without contention
        base = evaluate(build_schedule(model, TOY, plan, w, b), plan.prefetch_depth, plan.overlap_copy,
                        plan.vram_slots, plan.pinned_slots)
        assert fast.c_end[-1] >= base.c_end[-1] * (1 - 1e-12)


def test_fast_refuses_parallel_readers():
    model = toy_model()
    plan = toy_plan(model, "disk_raw", reader_threads=2)
    with pytest.raises(Unsupported):
        fast_simulate(model, TOY, plan, Workload(new_tokens=1, prompt_tokens=1), BIG)


@settings(max_examples=80, deadline=None)
@given(cases(), st.sampled_from(["link", "disk", "cache", "unpack"]), st.floats(1.1, 10))
def test_more_bandwidth_is_never_slower(case, which, factor):
    model, plan, w, b = case
    fields = {"link": ["link.pinned_h2d_bytes_per_s", "link.pageable_h2d_bytes_per_s"],
              "disk": ["storage.cold_read_bytes_per_s"], "cache": ["storage.cache_read_bytes_per_s"]}
    if which == "unpack":
        faster_plan, faster = plan.model_copy(update={"codec": Codec(ratio=0.6, unpack_bytes_per_s=plan.codec.unpack_bytes_per_s * factor)}), TOY
    else:
        faster_plan = plan
        faster = TOY.with_overrides(**{f: TOY.model_dump()[f.split(".")[0]][f.split(".")[1]] * factor
                                               for f in fields[which]})
    slow = fast_simulate(model, TOY, plan, w, b)["total_s"]
    fast = fast_simulate(model, faster, faster_plan, w, b)["total_s"]
    assert fast <= slow * (1 + 1e-12)


@settings(max_examples=80, deadline=None)
@given(cases(moe=False), st.data())
def test_resident_unit_is_never_slower(case, data):
    model, plan, w, _ = case
    k = data.draw(st.integers(0, len(model.units) - 1))
    placements = list(plan.placements)
    placements[k] = placements[k].model_copy(update={"tier": "vram"})
    resident = plan.model_copy(update={"placements": tuple(placements)})
    assert fast_simulate(model, TOY, resident, w, BIG)["total_s"] <= \
        fast_simulate(model, TOY, plan, w, BIG)["total_s"] * (1 + 1e-12)


@settings(max_examples=80, deadline=None)
@given(cases())
def test_time_is_at_least_the_busiest_resource(case):
    model, plan, w, b = case
    res = simulate(model, TOY, plan, w, b)
    work: dict[str, float] = {}
    for e in res.events:
        if e.stage != "wait":
            work[e.resource] = work.get(e.resource, 0.0) + e.duration_s
    compute = sum(v for k, v in work.items() if k in ("gpu", "cpu"))
    assert res.summary["total_s"] >= max(max(work.values()), compute) * (1 - 1e-12)


@settings(max_examples=60, deadline=None)
@given(cases())
def test_warm_page_cache_is_never_slower(case):
    model, plan, w, b = case
    cold = fast_simulate(model, TOY, plan, w.model_copy(update={"warm": False}), b)["total_s"]
    warm = fast_simulate(model, TOY, plan, w.model_copy(update={"warm": True}), b)["total_s"]
    assert warm <= cold * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(cases())
def test_identical_inputs_identical_traces(case):
    model, plan, w, b = case
    assert simulate(model, TOY, plan, w, b).events == simulate(model, TOY, plan, w, b).events


@settings(max_examples=60, deadline=None)
@given(cases(), st.sampled_from([2, 4]))
def test_more_disk_readers_are_never_slower(case, readers):
    model, plan, w, b = case
    one = simulate(model, TOY, plan, w, b)
    many = simulate(model, TOY, plan.model_copy(update={"reader_threads": readers}), w, b)
    assert many.summary["total_s"] <= one.summary["total_s"] * (1 + 1e-12)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=5), st.integers(0, 200), st.booleans(),
       st.sampled_from([0.0, 0.5, 4.0]), st.integers(1, 4))
def test_airllm_faulting_loader(sizes, spare, warm, cleanup, tokens):
    """AirLLM's plans (cold reads priced in the loader's wait, the page cache from none to all of the model): the
    fast evaluator gives the SimPy timeline's times, the faulted part of every wait is non-negative and within the
    item's engine cost, and a warm page cache is never slower."""
    from sim.engines.airllm.costs import AirllmCosts
    from sim.engines.placements import POLICIES
    from validate.peer_calibration import with_peer
    model = toy_model(tuple(sizes))
    m = with_peer(TOY, "airllm", AirllmCosts(pin_each_load=True, mmap_reads=True, load_unit_s=cleanup))
    w = Workload(batch=1, prompt_tokens=1, new_tokens=tokens, warm=warm)
    b = Budgets(vram_bytes=10**6, ram_bytes=3 * max(sizes) + spare, pinned_bytes=10**6)
    plan = POLICIES["airllm"](model, m, w, b)
    res = simulate(model, m, plan, w, b)
    sch = build_schedule(model, m, plan, w, b)
    fast = evaluate(sch, plan.prefetch_depth, plan.overlap_copy, plan.vram_slots, plan.pinned_slots)
    for a, c in zip(fast.c_end, res.c_end):
        assert abs(a - c) <= 1e-9 * max(1.0, abs(c))
    assert sch.loader_faults and (sch.fault_s >= 0).all() and (sch.fault_s <= sch.overhead_s + 1e-12).all()
    if not warm:
        hot = fast_simulate(model, m, plan, w.model_copy(update={"warm": True}), b)
        assert hot["total_s"] <= fast_simulate(model, m, plan, w, b)["total_s"] * (1 + 1e-9)
