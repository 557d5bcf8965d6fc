"""The local search's pieces, by hand-worked values and invariants: evenly spread options, unit groups equal to
planner.options.groups, over-budget assignments rejected without an evaluation, a converged search is a local optimum
of its neighbourhood even when the exploration budget allows one descent."""
import numpy as np

import planner.search as search_mod
from hwmodels import get_machine
from planner.candidates import unit_groups
from planner.evaluator import Evaluator
from planner.choices import OPTIONS
from planner.options import groups, option_costs, usage
from planner.search import IMPROVES, Search, spread
from sim.model.resolve import load_model
from sim.plan import Budgets, Request, Workload
from tests.test_planner_properties import RAW, TOY
from tests.toys import toy_model


def test_spread_gives_each_position_to_the_option_furthest_behind_its_share():
    """3 a and 1 b over 4: deficits (a, b) 0.75/0.25 -> a; 0.5/0.5, a tie, to the more frequent -> a; 0.25/0.75 -> b;
    then a."""
    assert spread({"a": 3, "b": 1}, 4) == ["a", "a", "b", "a"]
    assert spread({"a": 2, "b": 2, "c": 0}, 4) == ["a", "b", "a", "b"]
    assert spread({"x": 5}, 5) == ["x"] * 5
    got = spread({"a": 10, "b": 30}, 40)  # a every 4th position, after b's first 2 (b leads the ties)
    assert [i for i, o in enumerate(got) if o == "a"] == [2, 6, 10, 14, 18, 22, 26, 30, 34, 38]


def test_unit_groups_equal_the_options_groups():
    m = get_machine("t4-cloud")
    for name in ("mixtral-8x7b", "qwen3-14b"):
        q = load_model(name)
        ev = Evaluator(Request(q, m, Workload(new_tokens=3), Budgets.of(m)), None)
        use = usage(ev.req, ev=ev)
        for cached in (True, False):
            costs = option_costs(ev.req, use, None, cached)
            want, got = groups(costs), unit_groups(costs)
            assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(want, got))


def toy_search(sizes, budgets, **kw) -> Search:
    model = toy_model(sizes)
    ev = Evaluator(Request(model, TOY, Workload(prompt_tokens=2, new_tokens=3), budgets), None)
    return Search(ev, [np.array([i]) for i in range(len(sizes))], RAW, **kw)


def test_an_assignment_over_budget_with_the_least_staging_is_not_evaluated():
    """Two units of 30 bytes in a 50-byte VRAM: resident, they need 60 bytes whatever the loader settings (a streamed
    unit needs a slot as large); with one computed by the CPU from RAM, 30."""
    s = toy_search((30, 30), Budgets(vram_bytes=50, ram_bytes=100, pinned_bytes=50))
    vram = OPTIONS.index(("vram", "gpu"))
    assert s.best_settings(np.array([vram, vram])) == (None, float("inf"))
    assert s.ev.evaluations == 0
    setting, t = s.best_settings(np.array([vram, OPTIONS.index(("ram_pageable", "cpu"))]))
    assert setting is not None and t < float("inf") and s.ev.evaluations > 0


def test_one_descent_when_the_exploration_budget_is_spent_still_ends_at_a_local_optimum(monkeypatch):
    monkeypatch.setattr(search_mod, "EXPLORE_ITEMS", 1)
    s = toy_search((9, 4, 7, 5, 3, 8, 6, 2, 5, 4), Budgets(vram_bytes=40, ram_bytes=30, pinned_bytes=12))
    descents = []
    real_descend = s.descend
    monkeypatch.setattr(s, "descend", lambda *a: descents.append(a) or real_descend(*a))
    start = np.full(10, OPTIONS.index(("disk_raw", "gpu")))
    out = s.run([(start, *s.best_settings(start))] * 2 + [(start.copy(), *s.best_settings(start))])
    assert len(descents) == 1 and out.converged and out.stopped == "converged"
    for pick, b in s.moves(out.assign):  # no move of the neighbourhood improves, with any loader setting
        trial = out.assign.copy()
        trial[pick] = b
        assert s.best_settings(trial)[1] >= out.score * IMPROVES
    assert s.best_settings(out.assign)[1] >= out.score * IMPROVES


def test_row_classes_group_rows_by_their_bits_even_when_two_hashes_collide():
    """Rows are grouped by a hash of their bits; two rows whose hashes collide (built here from the multipliers) but
    whose bits differ stay apart, as np.unique keeps them."""
    from planner.options import row_classes
    mult = np.random.default_rng(0).integers(1, 2**63, size=2, dtype=np.uint64)
    a = np.array([4607182418800017408, 4611686018427387904], dtype=np.uint64)       # the bits of (1.0, 2.0)
    with np.errstate(over="ignore"):  # the hash wraps modulo 2**64, and so do these
        b = np.array([a[0] + mult[1], a[1] - mult[0]], dtype=np.uint64)              # same hash, other bits
    rows = np.stack([a, b, a, a]).view(np.float64)
    assert ((rows.view(np.uint64) * mult).sum(axis=1)[:2] == (b * mult).sum()).all()
    first, inverse = row_classes(rows)
    assert sorted(first.tolist()) == [0, 1] and inverse[0] == inverse[2] == inverse[3] != inverse[1]
    rows = np.random.default_rng(1).integers(0, 3, size=(200, 5)).astype(float)
    _, want_first, want_inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    first, inverse = row_classes(rows)
    assert sorted(first.tolist()) == sorted(want_first.tolist())
    assert (first[inverse] == want_first[want_inverse.ravel()]).all()


def test_integer_programs_ruled_out_by_memory_are_those_highs_finds_infeasible(monkeypatch):
    """solve skips HiGHS where the least memory the units can take exceeds a budget (or the VRAM and RAM budgets
    together); every candidate program, solved by HiGHS, gives the same result."""
    from scipy.optimize import milp as scipy_milp

    import planner.milp as milp_mod
    from planner.candidates import milp_candidates
    m, q = get_machine("rtx3080-laptop"), load_model("qwen3-14b")
    w = Workload(new_tokens=3)
    options = [o for o in OPTIONS if o != ("ram_pinned", "cpu")]
    for b in (Budgets.of(m, vram=4 * 2**30), Budgets.of(m, vram=2 * 2**30, ram=20 * 2**30)):
        ev = Evaluator(Request(q, m, w, b), None)
        use = usage(ev.req, ev=ev)
        skipped, calls = [], []
        real = milp_mod._no_fit
        monkeypatch.setattr(milp_mod, "_no_fit", lambda *a: skipped.append(real(*a)) or False)
        monkeypatch.setattr(milp_mod, "milp", lambda *a, **k: calls.append(scipy_milp(*a, **k)) or calls[-1])
        want = milp_candidates(ev.req, use, None, options)
        monkeypatch.undo()
        got = milp_candidates(ev.req, use, None, options)
        assert len(got) == len(want) and all(np.array_equal(x, y) for x, y in zip(got, want))
        assert any(skipped) and all(r.x is None for r, s in zip(calls, skipped) if s)
