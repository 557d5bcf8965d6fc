"""The planner behind plan, pareto and whatif: a sweep never gets slower with more memory (by construction), the
heuristic search finds swaps, and each engine's printed bound holds for that engine's plans."""
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import planner.core as core
from planner.engine_bound import engine_bound_s
from planner.evaluator import Evaluator, objective_value
from planner.judge import PlanOptions
from planner.pareto import plan_requests
from planner.search import Search
from sim.costs.load import load_time_s
from sim.costs.memory import PlanError
from sim.plan import Budgets, Request, Workload
from sim.run.simulate import fast_simulate
from tests.test_planner import THREE, TOY
from tests.toys import toy_model


def request_s(model, plan, w, b) -> float:
    s = fast_simulate(model, TOY, plan, w, b)
    return s["total_s"] + load_time_s(model, TOY, plan, w.warm)["total_s"]


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 40), min_size=2, max_size=3), st.integers(0, 60), st.integers(0, 60),
       st.integers(0, 40), st.sampled_from(["vram_bytes", "ram_bytes", "pinned_bytes"]))
def test_more_memory_in_a_sweep_is_never_slower(sizes, vram, ram, extra, axis):
    """plan_requests plans the smaller budget first and judges the larger beside its plan: the larger budget's
    request time is never above the smaller's, whatever the search finds (toy machine, 2-3 units)."""
    model, w = toy_model(tuple(sizes)), Workload(prompt_tokens=1, new_tokens=3)
    big = max(sizes)
    small = Budgets(vram_bytes=2 * big + vram, ram_bytes=3 * big + 40 + ram, pinned_bytes=2 * big + ram // 2)
    large = small.model_copy(update={axis: getattr(small, axis) + extra})
    reps = plan_requests([Request(model, TOY, w, large), Request(model, TOY, w, small)], tiers=THREE,
                         objective="request", confirm=False)
    if reps[1].plan.feasible:
        assert reps[0].plan.feasible
        assert request_s(model, reps[0].plan, w, large) <= request_s(model, reps[1].plan, w, small) * (1 + 1e-9)


def test_the_evaluators_load_is_the_load_phase_of_the_plan():
    """Evaluator.load_s equals sim.costs.load.load_time_s for the same plan (the request objective's load)."""
    model, w = toy_model((10, 20, 30, 5)), Workload(prompt_tokens=2, new_tokens=3)
    b = Budgets(vram_bytes=200, ram_bytes=400, pinned_bytes=200)
    ev = Evaluator(Request(model, TOY, w, b), None)
    for assign in ([0, 1, 2, 3], [1, 1, 3, 0], [3, 3, 3, 3]):
        a = np.array(assign)
        for s in ((1, 2, 2, None), (0, 1, 1, None)):
            want = load_time_s(model, TOY, ev.plan(a, s), w.warm)["total_s"]
            assert abs(ev.load_s(a, s) - want) <= 1e-12 * max(want, 1.0)


def test_objectives_rank_by_what_they_name():
    """'request' adds the load to the run, 'total' is the run, 'token' the time per token (ties to the shorter run)."""
    assert objective_value("request", 0.5, 10.0, 4.0) == 14.0
    assert objective_value("total", 0.5, 10.0, 4.0) == 10.0
    assert objective_value("token", 0.5, 10.0, 4.0) == 0.5 + 1e-8


def test_a_descent_tries_swapping_two_units():
    """At a local optimum of one-unit moves, the swaps of two units' options are the next neighbourhood: on a
    3-unit toy every pair in different options is offered, each exchanging the two options."""
    model, w = toy_model((10, 20, 30)), Workload(prompt_tokens=1, new_tokens=2)
    ev = Evaluator(Request(model, TOY, w, Budgets(vram_bytes=200, ram_bytes=400, pinned_bytes=200)), None)
    search = Search(ev, [np.array([0]), np.array([1]), np.array([2])], [0, 1, 3])
    a = np.array([0, 1, 1])
    got = {(tuple(u.tolist()), tuple(t.tolist())) for u, t in search.swaps(a)}
    assert got == {((0, 1), (1, 0)), ((0, 2), (1, 0))}


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 40), min_size=3, max_size=4), st.integers(0, 80), st.integers(40, 200))
def test_heuristic_search_matches_exhaustive_on_tiny_instances(sizes, vram, ram):
    """The integer program and local search (exhaustive mode off) reach the exhaustive optimum of the same plan
    space on 3-4 units with three tiers, by the request objective."""
    model, w = toy_model(tuple(sizes)), Workload(prompt_tokens=1, new_tokens=3)
    b = Budgets(vram_bytes=2 * max(sizes) + vram, ram_bytes=3 * max(sizes) + ram, pinned_bytes=2 * max(sizes) + ram // 2)
    req, opts = Request(model, TOY, w, b), PlanOptions(tiers=THREE, allow_cpu=False, objective="request", confirm=False)
    saved = core.EXACT_LIMIT
    try:
        core.EXACT_LIMIT = 10**7
        best = core.plan_request(req, opts).plan
        core.EXACT_LIMIT = 0
        got = core.plan_request(req, opts).plan
    finally:
        core.EXACT_LIMIT = saved
    if best.feasible:
        assert got.feasible and request_s(model, got, w, b) <= request_s(model, best, w, b) * (1 + 1e-9)


def test_llamacpp_bound_holds_for_every_ngl():
    """The llama.cpp bound printed by `plan` is below the run of every -ngl placement llama.cpp can run at the
    budgets (Llama-3.1-8B on t4-cloud at 6 GiB, every 4th -ngl that fits), and is a positive number."""
    from sim.engines.llamacpp.layout import llamacpp_ngl
    from sim.model.resolve import load_model
    from hwmodels import get_machine
    m, h = load_model("llama-3.1-8b"), get_machine("t4-cloud")
    w, b = Workload(prompt_tokens=32, new_tokens=3), Budgets.of(get_machine("t4-cloud"), vram=6 * 2**30)
    runs = []
    for ngl in range(0, m.n_blocks + 2, 4):
        try:
            p = llamacpp_ngl(m, h, w, b, ngl)
        except PlanError:  # more layers than the VRAM holds
            continue
        runs.append((fast_simulate(m, h, p, w, b)["total_s"], engine_bound_s(m, h, w, p, b.vram_bytes)))
    assert len(runs) >= 3 and all(0 < lb <= t for t, lb in runs)
