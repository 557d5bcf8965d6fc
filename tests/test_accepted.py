"""A calibration on a busy host: the fastest round's rate, and a value outside the profile's ranges left out (the
base preset's stays, a note says so), by hand-worked rounds; no timing."""
import json

import pytest

from hwmodels import get_machine
from hwmodels.presets import load_machine, profile_range
from hwmodels.units import InputError
from validate.accepted import accepted_overrides, fastest_rate


def test_the_rate_is_the_fastest_rounds():
    # 1.2e10 FLOP in rounds of 3, 0.75 (the unloaded one) and 600 s: 1.6e10 FLOP/s
    assert fastest_rate(1.2e10, [3.0, 0.75, 600.0]) == 1.6e10
    with pytest.raises(ValueError):
        fastest_rate(1.0, [])


def test_a_range_is_reported_only_for_a_value_outside_it():
    assert profile_range("bf16_flops_per_s", 1.9e7) == (1e8, 1e19)
    assert profile_range("bf16_flops_per_s", 1.6e10) is None
    assert profile_range("unpack_bytes_per_s_per_thread", {"zstd": 5e5}) == (1e6, 1e15)
    assert profile_range("latency_s", 2.0) == (0.0, 1.0)
    assert profile_range("name", "a cpu") is None


MEASURED = {"gpu.bf16_flops_per_s": 1.9e7, "cpu.flops_per_s": 1.9e7, "storage.cold_read_bytes_per_s": 2e9,
            "cpu.unpack_bytes_per_s_per_thread": {"zstd": 5e8}, "gpu.name": "CPU as the device",
            "link.latency_s": 0.0, "peers.airllm.load_unit_s": 0.02}


def test_a_rate_a_busy_host_spoiled_is_left_out_with_a_note():
    kept, notes = accepted_overrides(MEASURED)
    assert kept == {k: v for k, v in MEASURED.items() if not k.endswith("flops_per_s")}
    assert [n.split(":")[0] for n in notes] == ["gpu.bf16_flops_per_s", "cpu.flops_per_s"]
    assert notes[0] == ("gpu.bf16_flops_per_s: measured 19000000.0, outside 1e+08..1e+19: too noisy to measure on "
                        "this host (was it busy?); the base preset's value stays")


def test_the_profile_then_keeps_the_base_value_and_loads(tmp_path):
    base = get_machine("rtx3080-laptop")
    kept, _ = accepted_overrides(MEASURED)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"machine": base.with_overrides(**kept).model_dump(mode="json")}))
    m = load_machine(str(path))
    assert m.gpu.bf16_flops_per_s == base.gpu.bf16_flops_per_s and m.cpu.flops_per_s == base.cpu.flops_per_s
    assert m.storage.cold_read_bytes_per_s == 2e9
    # the spoiled value written as it was would fail the range check of every command that loads the profile
    path.write_text(json.dumps({"machine": base.with_overrides(**MEASURED).model_dump(mode="json")}))
    with pytest.raises(InputError, match=r"field 'gpu.bf16_flops_per_s' = 19000000.0 is outside 1e\+08..1e\+19"):
        load_machine(str(path))
