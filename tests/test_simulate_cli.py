"""`offloadsim simulate`: JSON keys, outputs written, plans from files, bad input."""
import json

import pytest

from offloadsim.cli import main
from sim.plan import Plan


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("policy", ["airllm", "accelerate", "llamacpp", "stream"])
def test_simulate_policies_json(capsys, tmp_path, policy):
    rc, out, err = run(capsys, "simulate", "qwen3-14b", "--machine", "rtx3080-laptop", "--policy", policy, "--vram", "4GiB",
                       "--new-tokens", "3", "--prompt-tokens", "16", "--json", "--attribution", "2",
                       "--gantt", str(tmp_path / "g.png"), "--trace", str(tmp_path / "t.json"))
    assert rc == 0, err
    data = json.loads(out)
    assert {"time_per_token_s", "ttft_s", "stall_s", "peak_vram_bytes", "events"} <= set(data)
    assert data["peak_vram_bytes"] <= 4 * 2**30
    assert data["ttft_s"] > 0 and data["time_per_token_s"] > 0
    assert (tmp_path / "g.png").stat().st_size > 1000
    trace = json.loads((tmp_path / "t.json").read_text())
    assert sum(1 for e in trace["traceEvents"] if e["ph"] == "X") == data["events"]


def test_airllm_slower_than_stream_with_same_weights_on_disk(capsys):
    """AirLLM re-reads every layer cold each token and never overlaps its copies: slower than the stream policy."""
    got = {}
    for policy in ("airllm", "stream"):
        rc, out, _ = run(capsys, "simulate", "llama-3.1-8b", "--machine", "desktop-4090", "--policy", policy,
                         "--new-tokens", "3", "--prompt-tokens", "8", "--json", "--attribution", "0", "--vram", "4GiB")
        got[policy] = json.loads(out)["time_per_token_s"]
    assert got["airllm"] > got["stream"]


def test_plan_file_round_trip(capsys, tmp_path):
    from hwmodels import get_machine
    from sim.model.resolve import load_model
    from sim.plan import Budgets, Workload
    from sim.engines.placements import POLICIES
    m, q = get_machine("rtx3080-laptop"), load_model("qwen3-14b")
    plan = POLICIES["accelerate"](q, m, Workload(), Budgets.of(m, vram=7 * 2**30))
    plan.save(tmp_path / "p.json")
    assert Plan.load(tmp_path / "p.json") == plan
    rc, out, _ = run(capsys, "simulate", "qwen3-14b", "--machine", "rtx3080-laptop", "--plan", str(tmp_path / "p.json"),
                     "--vram", "7GiB", "--json", "--new-tokens", "2", "--attribution", "0")
    assert rc == 0 and json.loads(out)["policy"] == "accelerate"


@pytest.mark.parametrize("argv, match", [
    (["--policy", "vllm"], "policy: unknown name 'vllm'"),
    (["--policy", "resident", "--vram", "4GiB"], "vram: the plan needs"),
    (["--vram", "lots"], "vram: cannot read 'lots'"),
    (["--new-tokens", "0"], "new-tokens: 0 must be at least 1"),
    (["--plan", "/nonexistent/plan.json"], "plan: '/nonexistent/plan.json' is not a regular file"),
])
def test_simulate_bad_input(capsys, argv, match):
    rc, _, err = run(capsys, "simulate", "qwen3-14b", "--machine", "rtx3080-laptop", *argv)
    assert rc == 2 and match in err and "Traceback" not in err


def test_bad_plan_version(capsys, tmp_path):
    (tmp_path / "p.json").write_text('{"version": 7, "model": "x", "machine": "y", "placements": []}')
    rc, _, err = run(capsys, "simulate", "qwen3-14b", "--plan", str(tmp_path / "p.json"))
    assert rc == 2 and "version 7" in err


def test_simulate_says_when_a_peers_costs_are_not_measured(capsys):
    """A peer's policy on a machine whose costs for it are not measured prints a note saying the time is its pipeline
    alone (as `plan --engine` does); a measured machine and offloadsim's own policies print none."""
    args = ("--new-tokens", "2", "--prompt-tokens", "8", "--attribution", "0")
    rc, out, err = run(capsys, "simulate", "llama-3.1-8b", "--machine", "rtx3080-laptop", "--policy", "airllm", *args)
    assert rc == 0, err
    assert "note: airllm's host costs are not measured for rtx3080-laptop" in out
    rc, out, _ = run(capsys, "simulate", "llama-3.1-8b", "--machine", "rtx3080-laptop", "--policy", "airllm", "--json",
                     *args)
    assert [n[:56] for n in json.loads(out)["notes"]] == ["airllm's host costs are not measured for rtx3080-laptop:"]
    for machine, policy in (("h200-testbox", "airllm"), ("rtx3080-laptop", "stream")):
        rc, out, _ = run(capsys, "simulate", "llama-3.1-8b", "--machine", machine, "--policy", policy, "--json", *args)
        assert rc == 0 and json.loads(out)["notes"] == []
