"""Hostile numbers and names at their readers, against hand-worked cases: one rule for every number read from a
file (finite, within its unit's physical range), one check of a model's heads shared by every command, names
escaped, and walks that cannot loop."""
import contextlib
import io
import json

import pytest

from hwmodels import get_machine
from hwmodels.names import shown
from hwmodels.ranges import bad_number, range_of
from offloadsim.cli import main
from sim.analysis.critical import critical_path
from sim.run.events import Event


def _cli(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as out:
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_a_fields_unit_gives_its_range_and_a_named_table_takes_its_tables():
    assert range_of("pinned_h2d_bytes_per_s") == (1e6, 1e15) and range_of("step_s") == (0.0, 1.0)
    assert range_of("avg_ns") == (1e3, 1e15) and range_of("name") is None
    assert bad_number({"cpu": {"unpack_bytes_per_s_per_thread": {"zstd": 1e-300}}})[0] == \
        "cpu.unpack_bytes_per_s_per_thread.zstd"
    assert bad_number({"engine": {"stream_overhead_s": {"ram_pinned": 2.0}}})[2] == "is outside 0..1"
    assert bad_number({"a": [1, 2, float("inf")]})[0] == "a[2]" and bad_number({"x": 1e6, "y_s": 0.5}) is None


@pytest.mark.parametrize("value", ["Infinity", "1e308", "NaN"])
def test_a_profile_with_an_endless_step_is_refused_when_read(tmp_path, value):
    m = json.loads(get_machine("rtx3080-laptop").model_dump_json())
    m["peers"] = {"llamacpp": {"step_s": 0.0}}
    text = json.dumps({"machine": m}).replace('"step_s": 0.0', f'"step_s": {value}')
    (tmp_path / "p.json").write_text(text)
    cmd = ["simulate", "qwen3-14b", "--policy", "llamacpp"] if value == "1e308" else ["info", "qwen3-14b"]
    rc, _, err = _cli(cmd + ["--machine", str(tmp_path / "p.json")])
    assert rc == 2 and "step_s" in err and err.count("\n") == 1


def test_a_plan_whose_codec_decodes_at_1e_300_bytes_per_s_is_refused(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
           "num_attention_heads": 4, "vocab_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert _cli(["plan", str(tmp_path / "config.json"), "--time-budget", "0.2", "--out", str(tmp_path / "p.json")])[0] == 0
    plan = json.loads((tmp_path / "p.json").read_text())
    plan["codec"] = {"name": "zstd", "ratio": 0.7, "unpack_bytes_per_s": 1e-300, "threads": 1}
    (tmp_path / "p.json").write_text(json.dumps(plan))
    rc, _, err = _cli(["simulate", str(tmp_path / "config.json"), "--plan", str(tmp_path / "p.json")])
    assert rc == 2 and "codec.unpack_bytes_per_s" in err and "1e+06" in err


def test_hidden_64_with_3_heads_is_refused_by_every_command_alike(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "intermediate_size": 128,
           "num_attention_heads": 3, "num_key_value_heads": 3, "vocab_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for argv in (["info", str(tmp_path / "config.json")], ["plan", str(tmp_path / "config.json")],
                 ["make-checkpoint", "--preset", "llama-3.1-8b", "--layers", "1", "--hidden", "64", "--heads", "3",
                  "--kv-heads", "3", "--vocab", "128", "--out", str(tmp_path / "ck")]):
        rc, _, err = _cli(argv)
        assert rc == 2 and "does not divide hidden_size (64)" in err, (argv, err)
    assert not (tmp_path / "ck").exists()


def test_a_dense_config_with_biased_mlps_is_refused_not_read_without_them(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "intermediate_size": 128,
           "num_attention_heads": 4, "vocab_size": 128, "mlp_bias": True}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc, _, err = _cli(["info", str(tmp_path / "config.json")])
    assert rc == 2 and "'mlp_bias'" in err


def test_names_from_files_are_printed_escaped_and_cut():
    assert shown("a\x1b[31mb\x07") == "a\\x1b[31mb\\x07" and shown("\u202eevil") == "\\u202eevil"
    long = shown("x" * 5000)
    assert len(long) == 100 and "..." in long and shown("Qwen/Qwen3-14B") == "Qwen/Qwen3-14B"


def test_the_critical_path_walk_visits_each_event_once():
    # two zero-length events ending at t = 1 released each other's slot: the walk used to bounce between them
    evs = [Event(0, "a", "compute", "gpu", 0.0, 1.0), Event(0, "b", "copy", "copy", 1.0, 1.0),
           Event(0, "c", "read", "storage", 1.0, 1.0), Event(0, "d", "compute", "cpu", 1.0, 2.0)]
    path = critical_path(evs, prefetch_depth=1)
    assert len(path) == len({(e.unit, e.stage) for e in path}) <= 4


def test_hw_detect_with_a_gpu_reporting_0_lanes_keeps_the_base_link(monkeypatch):
    import offloadsim.detect as d
    monkeypatch.setattr(d, "_gpu", lambda: ({"name": "NVIDIA H200\x1b[2J", "vram_bytes": 141 * 2**30,
                                             "pcie_generation": 5, "pcie_lanes": 0}, "nvidia-smi"))
    monkeypatch.setattr(d, "memcpy_speed", lambda nbytes=0: 1e10)
    monkeypatch.setattr(d, "disk_speeds", lambda folder, nbytes=0: None)
    m, notes = d.detect_machine(".")
    assert m.link.lanes == 16 and any("x0, not a link that exists" in n for n in notes)
    assert "\x1b" not in " ".join(notes) and "\\x1b[2J" in notes[0]
