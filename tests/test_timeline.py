"""Hand-worked timelines on 3-layer toy hardware, with exact times (conftest.toy_machine).

Units of 4, 8 and 2 bytes compute in 0.4, 0.8 and 0.2 s (10 B/s of VRAM); the pinned link moves 2 B/s, the disk
reads 1 B/s cold and 4 B/s from the page cache.
"""
import pytest

from sim.analysis.critical import critical_path, path_breakdown
from sim.costs.equations import t_prep
from sim.plan import Budgets, Workload
from sim.run.simulate import simulate
from tests.toys import BIG, toy_model, toy_plan

ONE = Workload(batch=1, prompt_tokens=1, new_tokens=1)


def compute_times(res):
    return [(e.unit, e.start_s, e.end_s) for e in res.events if e.stage == "compute"]


def test_depth0_costs_eq1_plus_compute(toy_machine):
    m = toy_model()
    res = simulate(m, toy_machine, toy_plan(m, "ram_pinned", prefetch_depth=0, vram_slots=1), ONE, BIG)
    assert compute_times(res) == [("l0", 2.0, 2.4), ("l1", 6.4, pytest.approx(7.2)), ("l2", pytest.approx(8.2), pytest.approx(8.4))]
    expected = sum(t_prep(u.nbytes, "ram_pinned", toy_machine).total_s + u.nbytes / 10 for u in m.units)
    assert res.summary["total_s"] == pytest.approx(expected, rel=1e-12)


def test_depth1_double_buffer(toy_machine):
    m = toy_model()
    res = simulate(m, toy_machine, toy_plan(m, "ram_pinned", prefetch_depth=1, vram_slots=2), ONE, BIG)
    assert compute_times(res) == [("l0", 2.0, 2.4), ("l1", 6.0, 6.8), ("l2", 7.0, pytest.approx(7.2))]
    assert res.summary["stall_s"] == pytest.approx(2.0 + 3.6 + 0.2)


def test_disk_cold_with_pinned_slots(toy_machine):
    m = toy_model()
    budgets = Budgets(vram_bytes=100, ram_bytes=16, pinned_bytes=16)  # 2 pinned slots of 8 B, no page cache
    res = simulate(m, toy_machine, toy_plan(m, "disk_raw", prefetch_depth=1, vram_slots=2, pinned_slots=2), ONE, budgets)
    reads = [(e.start_s, e.end_s, e.detail) for e in res.events if e.stage == "read"]
    assert reads == [(0.0, 4.0, "cold"), (6.0, 14.0, "cold"), (18.0, 20.0, "cold")]
    assert compute_times(res)[-1] == ("l2", 21.0, pytest.approx(21.2))


def test_page_cache_hits_on_second_token(toy_machine):
    m = toy_model()
    two = Workload(batch=1, prompt_tokens=1, new_tokens=2)
    cached = Budgets(vram_bytes=100, ram_bytes=16 + 14, pinned_bytes=16)
    res = simulate(m, toy_machine, toy_plan(m, "disk_raw", prefetch_depth=0, vram_slots=1, pinned_slots=2), two, cached)
    details = [(e.token, e.detail) for e in res.events if e.stage == "read"]
    assert details == [(0, "cold")] * 3 + [(1, "cache")] * 3
    # token 1: each unit costs read at 4 B/s + copy at 2 B/s + compute at 10 B/s
    assert res.summary["time_per_token_s"] == pytest.approx(sum(nb / 4 + nb / 2 + nb / 10 for nb in (4, 8, 2)))


def test_no_copy_overlap_waits_for_previous_compute(toy_machine):
    m = toy_model()
    res = simulate(m, toy_machine, toy_plan(m, "ram_pinned", prefetch_depth=2, vram_slots=3, overlap_copy=False), ONE, BIG)
    copies = [(e.start_s, e.end_s) for e in res.events if e.stage == "copy"]
    assert copies == [(0.0, 2.0), (2.4, 6.4), (pytest.approx(7.2), pytest.approx(8.2))]


def test_router_gates_expert_loads(toy_machine):
    m = toy_model(sizes=(4, 4), experts=2, top_k=1)
    tiers = ["vram", "ram_pinned", "ram_pinned"] * 2
    res = simulate(m, toy_machine, toy_plan(m, tiers, prefetch_depth=3, vram_slots=4), ONE, BIG)
    comp = {(e.unit): e for e in res.events if e.stage == "compute"}
    for e in res.events:
        if e.stage == "copy":
            router = comp[e.unit.split(".")[0]]
            assert e.start_s >= router.end_s - 1e-12
    assert len([e for e in res.events if e.stage == "compute" and ".e" in e.unit]) == 2  # top-1 of 2, per block


def test_predictor_lets_expert_load_early(toy_machine):
    m = toy_model(sizes=(4, 4), experts=2, top_k=1)
    tiers = ["vram", "ram_pinned", "ram_pinned"] * 2
    waiting = simulate(m, toy_machine, toy_plan(m, tiers, prefetch_depth=3, vram_slots=4), ONE, BIG)
    guessed = simulate(m, toy_machine, toy_plan(m, tiers, prefetch_depth=3, vram_slots=4, expert_predictor_hit_rate=1.0),
                       ONE, BIG)
    assert guessed.summary["total_s"] < waiting.summary["total_s"]


def test_critical_path_spans_the_run(toy_machine):
    m = toy_model()
    plan = toy_plan(m, "ram_pinned", prefetch_depth=1, vram_slots=2)
    res = simulate(m, toy_machine, plan, Workload(prompt_tokens=1, new_tokens=3), BIG)
    path = critical_path(list(res.events), 1)
    assert sum(path_breakdown(path).values()) == pytest.approx(res.summary["total_s"])
    assert path[0].start_s == 0.0


def test_over_budget_plan_is_refused(toy_machine):
    from sim.costs.memory import PlanError
    m = toy_model()
    with pytest.raises(PlanError, match="vram: the plan needs .* raise --vram"):
        simulate(m, toy_machine, toy_plan(m, "vram"), ONE, Budgets(vram_bytes=10, ram_bytes=100, pinned_bytes=100))


def test_big_steps_copy_cpu_layers_from_where_they_live(toy_machine):
    """llama.cpp's rule: a step with enough tokens copies CPU-placed layers to the GPU - at the pinned speed from
    pinned buffers (2 B/s), at the pageable speed from pageable memory (1 B/s); small steps compute them on the CPU."""
    from sim.plan import Placement, Plan
    m = toy_model()
    for tier, speed in (("ram_pinned", 2.0), ("ram_pageable", 1.0)):
        plan = Plan(model="toy", machine="toy", placements=tuple(Placement(unit=u.name, tier=tier, compute="cpu") for u in m.units),
                    prefetch_depth=0, vram_slots=1, pinned_slots=0, gpu_offload_min_tokens=4)
        res = simulate(m, toy_machine, plan, Workload(prompt_tokens=4, new_tokens=2), BIG)
        copies = [e for e in res.events if e.stage == "copy"]
        assert [e.token for e in copies] == [0, 0, 0]  # the 4-token prefill only
        assert [e.duration_s for e in copies] == pytest.approx([nb / speed for nb in (4, 8, 2)])
        assert {e.resource for e in res.events if e.stage == "compute" and e.token == 1} == {"cpu"}


def test_partial_page_cache_hit_reads_the_rest_from_disk(toy_machine):
    """An 8-byte unit in a 4-byte page cache: token 0 reads it cold (8 s) and leaves its last 4 bytes resident;
    token 1 finds them: 4 B at 4 B/s + 4 B at 1 B/s = 5 s, labelled "partial"."""
    m = toy_model(sizes=(8,))
    two = Workload(batch=1, prompt_tokens=1, new_tokens=2)
    budgets = Budgets(vram_bytes=100, ram_bytes=8 + 4, pinned_bytes=8)  # one 8-byte pinned slot, 4 B of page cache
    res = simulate(m, toy_machine, toy_plan(m, "disk_raw", prefetch_depth=0, vram_slots=1, pinned_slots=1), two, budgets)
    reads = [(e.token, e.start_s, e.end_s, e.detail) for e in res.events if e.stage == "read"]
    assert reads == [(0, 0.0, 8.0, "cold"), (1, pytest.approx(12.8), pytest.approx(17.8), "partial")]
    assert res.summary["time_per_token_s"] == pytest.approx(5 + 8 / 2 + 8 / 10)  # read + copy at 2 B/s + compute


@pytest.mark.parametrize("readers", [1, 2, 4])
def test_parallel_readers_each_read_at_its_own_time(toy_machine, readers):
    """With depth 3 every load may start at once. One reader: l0 0-4, l1 4-12, l2 12-14 (cold, 1 B/s). Two: l0 and
    l1 start together, l2 follows l0 on its reader (4-6). Four: all three at 0. No read takes longer for sharing."""
    m = toy_model()
    plan = toy_plan(m, "disk_raw", prefetch_depth=3, vram_slots=3, pinned_slots=3, reader_threads=readers)
    budgets = Budgets(vram_bytes=100, ram_bytes=24, pinned_bytes=24)  # 3 pinned slots of 8 B, no page cache
    res = simulate(m, toy_machine, plan, ONE, budgets)
    reads = sorted((e.unit, e.start_s, e.end_s) for e in res.events if e.stage == "read")
    expected = {1: [("l0", 0.0, 4.0), ("l1", 4.0, 12.0), ("l2", 12.0, 14.0)],
                2: [("l0", 0.0, 4.0), ("l1", 0.0, 8.0), ("l2", 4.0, 6.0)],
                4: [("l0", 0.0, 4.0), ("l1", 0.0, 8.0), ("l2", 0.0, 2.0)]}
    assert reads == expected[readers]
    one_reader = simulate(m, toy_machine, plan.model_copy(update={"reader_threads": 1}), ONE, budgets)
    assert res.summary["total_s"] <= one_reader.summary["total_s"]


@pytest.mark.parametrize("tiers", ["ram_pinned", ["vram", "ram_pageable", "ram_pinned"], "disk_raw"])
def test_critical_path_from_the_pipeline_rules_spans_the_run(toy_machine, tiers):
    """Built from sim/run/pipeline.py's rules, the path is gap-free from 0 to the end, whatever waits bind."""
    from sim.run.pipeline import rules
    m = toy_model()
    plan = toy_plan(m, tiers, prefetch_depth=1, vram_slots=2, pinned_slots=1)
    res = simulate(m, toy_machine, plan, Workload(prompt_tokens=1, new_tokens=3), BIG)
    pipe = (res.schedule, rules(res.schedule, 1, True, 2, 1))
    path = critical_path(list(res.events), 1, pipe)
    assert path[0].start_s == 0.0
    assert sum(path_breakdown(path).values()) == pytest.approx(res.summary["total_s"])
