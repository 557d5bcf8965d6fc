"""The local search's pieces, by hand-worked values and invariants: evenly spread options, unit groups equal to
planner.options.groups, over-budget assignments rejected without an evaluation, a converged search is a local optimum
of its neighbourhood even when the exploration budget allows one descent."""
import numpy as np

import planner.search as search_mod
from hwmodels import get_machine
from planner.candidates import unit_groups
from planner.evaluator import Evaluator
from planner.options import OPTIONS, groups, option_costs, usage
from planner.search import IMPROVES, Search, spread
from sim.models import load_model
from sim.plan import Budgets, Workload
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
        ev = Evaluator(q, m, Workload(new_tokens=3), Budgets.of(m), None)
        use = usage(q, m, ev.w, ev=ev)
        for cached in (True, False):
            costs = option_costs(q, m, ev.w, use, None, cached)
            want, got = groups(costs), unit_groups(costs)
            assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(want, got))


def toy_search(sizes, budgets, **kw) -> Search:
    model = toy_model(sizes)
    ev = Evaluator(model, TOY, Workload(prompt_tokens=2, new_tokens=3), budgets, None)
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
