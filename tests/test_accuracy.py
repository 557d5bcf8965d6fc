"""validate.accuracy: error statistics, the repeat floor, the families' tables and the readers' rules, on small
hand-made records with hand-worked errors."""
import math

import pytest

from hwmodels.units import InputError
from validate.accuracy.errors import abs_stats, error_pct, floor_pct, percentile, repeat_floor
from validate.accuracy.families import median_of_rounds, rounds_of_rows, table
from validate.accuracy.llamacpp import is_calibration
from validate.accuracy.llamacpp_runs import BenchRun, head_override, pooled
from validate.accuracy.matrix import executed, family_of, plan_class, CPU, GPU, PLANNER
from validate.accuracy.page import render_readme
from validate.accuracy.records import Row, call_date, read_call


def row(family="F", slice="s", pred=1.1, meas=1.0, held=True, setting=("f", "a", 1), date="2026-11-30",
        ttft=(float("nan"), float("nan"))):
    return Row(family, slice, "f.json", date, "a", "run", pred, meas, ttft[0], ttft[1], held, setting)


def test_error_is_predicted_over_measured_less_one():
    assert error_pct(1.1, 1.0) == pytest.approx(10.0)
    assert error_pct(0.75, 1.0) == pytest.approx(-25.0)
    assert math.isnan(error_pct(1.0, 0.0)) and math.isnan(error_pct(1.0, float("nan")))


def test_percentile_interpolates_between_ranks():
    assert percentile([5, 1, 4, 2, 3], 50) == 3
    assert percentile([1, 2, 3, 4, 5], 90) == pytest.approx(4.6)  # rank 3.6: 4 + 0.6 * (5 - 4)
    assert percentile([7.0], 90) == 7.0


def test_abs_stats_drop_nan_and_take_absolute_values():
    s = abs_stats([-10.0, 5.0, float("nan"), 20.0])
    assert (s.runs, s.median_pct, s.worst_pct) == (3, 10.0, 20.0)
    assert s.p90_pct == pytest.approx(18.0)  # sorted 5, 10, 20; rank 1.8: 10 + 0.8 * 10
    assert abs_stats([float("nan")]) is None


def test_repeat_floor_is_halfway_in_ratio():
    assert floor_pct([90.0, 110.0]) == pytest.approx(10.0)
    f = repeat_floor({"a": [90.0, 110.0], "b": [1.0, 3.0], "c": [5.0]})  # c timed once: not a setting timed again
    assert (f.settings, f.worst_pct) == (2, pytest.approx(50.0)) and f.median_pct == pytest.approx(30.0)
    assert repeat_floor({"c": [5.0]}) is None


def test_table_counts_held_out_runs_only_and_medians_of_rounds():
    rows = [row(pred=1.2, meas=1.0, setting=("k", 1)), row(pred=1.2, meas=1.5, setting=("k", 1)),
            row(pred=1.2, meas=1.2, setting=("k", 1)), row(slice="t", pred=0.9, meas=1.0, setting=("k", 2)),
            row(pred=5.0, meas=1.0, held=False, setting=("k", 3), date="2026-12-02")]
    t = table("F", rows, rounds_of_rows(rows))
    lines = {ln.name: ln for ln in t.lines}
    assert (t.runs, t.fitted, t.first_date, t.last_date) == (4, 1, "2026-11-30", "2026-12-02")
    assert lines["s"].tpot.runs == 3 and lines["t"].tpot.worst_pct == pytest.approx(10.0)
    # errors 20, 20, 0, 10: median 15, worst 20
    assert lines["all held-out runs"].tpot.median_pct == pytest.approx(15.0)
    # setting 1 against the median of its rounds (1.2): 0%; setting 2: 10%
    rounds = lines["each setting against the median of its rounds"].tpot
    assert rounds.runs == 2 and rounds.worst_pct == pytest.approx(10.0)
    assert t.floor.settings == 1 and t.floor.worst_pct == pytest.approx(100 * 0.5 / 2.5)
    assert lines["all held-out runs"].ttft is None


def test_median_of_rounds_keeps_one_row_per_setting():
    out = median_of_rounds([row(meas=1.0, setting=(1,)), row(meas=3.0, setting=(1,)), row(meas=2.0, setting=(2,))])
    assert [r.tpot_meas_s for r in out] == [2.0, 2.0]


def test_readme_table_names_each_family_with_runs_median_worst():
    rows = [row(family="offloadsim's engine, GPU-side plans", pred=1.1), row(family="AirLLM", pred=0.5)]
    text = render_readme([table(f, rows, {}) for f in ("offloadsim's engine, GPU-side plans", "AirLLM")])
    assert "| offloadsim's engine, GPU-side plans, time per token | 1 | 10.0% | 10.0% |" in text
    assert "| AirLLM, time per token | 1 | 50.0% | 50.0% |" in text
    assert "docs/accuracy.md" in text and "python benchmarks/accuracy.py" in text


def test_matrix_families_and_classes_come_from_the_label():
    assert family_of({"label": "planner 2.91GiB", "gpu_only": True}) == PLANNER
    assert family_of({"label": "CPU decoders", "gpu_only": False}) == CPU
    assert family_of({"label": "stream pinned RAM (repeat)", "gpu_only": True}) == GPU
    assert plan_class("pinned budget < streamed set") == "pinned budget below the streamed set"
    assert plan_class("stream pinned RAM") == "pinned RAM"


def test_executed_compares_copies_and_computes_only():
    a = [[0, "l0", "copy", 0.0, 1.0], [0, "l0", "compute", 1.0, 2.0], [0, "l0", "read", 0.0, 0.5]]
    b = [[0, "l0", "compute", 5.0, 6.0], [0, "l0", "copy", 3.0, 4.0]]
    assert executed(a) == executed(b) == {(0, "l0", "copy"), (0, "l0", "compute")}


def test_llamacpp_calibration_runs_are_the_ngl_extremes_middle_and_next_to_largest():
    ngls = [0, 4, 8, 16, 17]
    def gen(ngl, n_gen=12, n_prompt=0):
        return BenchRun("ngl", {"n_gpu_layers": ngl, "n_gen": n_gen, "n_prompt": n_prompt}, None)
    assert [is_calibration(gen(n), ngls) for n in ngls] == [True, False, True, True, True]  # middle: 8 (17 / 2)
    assert is_calibration(gen(17, 0, 128), ngls) and not is_calibration(gen(16, 0, 128), ngls)
    assert not is_calibration(gen(17, 0, 512), ngls)
    assert not is_calibration(BenchRun("exported", {"n_gpu_layers": 17, "n_gen": 12, "n_prompt": 0}, None), ngls)


def test_llamacpp_rounds_pool_their_repetitions():
    recs = [{"args": ["-ngl", "4"], "n_prompt": 0, "n_gen": 10, "avg_ns": 2e9, "samples_ns": [1e9, 3e9],
             "stddev_ns": 1e9},
            {"args": ["-ngl", "4"], "n_prompt": 0, "n_gen": 10, "avg_ns": 4e9, "samples_ns": [4e9], "stddev_ns": 0},
            {"args": ["-ngl", "4"], "n_prompt": 0, "n_gen": 10, "error": "failed"}]
    [(rec, rounds)] = pooled(recs)
    assert rec["samples_ns"] == [1e9, 3e9, 4e9] and rec["rounds"] == 2
    assert rec["avg_ns"] == pytest.approx(8e9 / 3)
    assert rounds == pytest.approx((0.2, 0.4))  # each round's median over its 10 tokens


def test_head_override_follows_the_first_matching_rule():
    assert head_override(["-ot", "output=CUDA0"])
    assert not head_override(["-ot", "blk\\.0\\..*=CPU"])
    assert not head_override(["-ot", "output=CPU"])


def test_a_bad_recorded_file_names_itself(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="x.json"):
        read_call(bad)
    bad.write_text('{"archs": []}')
    with pytest.raises(InputError, match="'date'"):
        read_call(bad)
    assert call_date({"date": "2026-12-01 01:17:06"}) == "2026-12-01"


def test_the_readme_changes_only_between_its_markers():
    from validate.accuracy.page import with_table
    text = "intro\n<!-- accuracy:begin -->\nold\n<!-- accuracy:end -->\nafter\n"
    assert with_table(text, "new") == "intro\n<!-- accuracy:begin -->\nnew\n<!-- accuracy:end -->\nafter\n"
    with pytest.raises(InputError, match="markers"):
        with_table("no markers here", "new")


def test_a_table_by_file_adds_a_line_per_recorded_file():
    rows = [row(pred=1.1), Row("F", "s", "g.json", "2026-11-30", "a", "run", 1.3, 1.0, float("nan"), float("nan"),
                               True, ("g", 1))]
    lines = {ln.name: ln for ln in table("F", rows, {}, by_file=True).lines}
    assert lines["in `f.json`"].tpot.worst_pct == pytest.approx(10.0)
    assert lines["in `g.json`"].tpot.worst_pct == pytest.approx(30.0)
    assert "in `f.json`" not in {ln.name for ln in table("F", rows, {}).lines}
