"""Sweeps: the grid by index, each row whatif's serial answer (in this process and on a Dask cluster), the results
file streamed and resumed, and what a large sweep is refused for."""
import itertools
import json

import pytest

from hwmodels import get_machine
from hwmodels.units import InputError
from offloadsim.cli import main
from planner import sweep as sweep_mod
from planner.sweep import Sweep, combo_at, index_of, run
from planner.whatif import evaluate as whatif_evaluate
from sim.model.resolve import load_model
from sim.plan import Workload

VARY = {"storage": ["sata", "nvme-gen4"], "model": ["llama-3.1-8b", "qwen3-14b"], "batch": ["4"]}


@pytest.fixture(scope="module")
def tiny():
    models = {m: load_model(m) for m in VARY["model"]}
    return Sweep(models, get_machine("rtx3080-laptop"), Workload(prompt_tokens=64, new_tokens=2), VARY)


@pytest.fixture(scope="module")
def expected(tiny) -> list[dict]:
    return serial(tiny)


def serial(s: Sweep) -> list[dict]:
    """Each combination planned by whatif's own per-combination function, one after another."""
    rows = []
    for storage, model, batch in itertools.product(*VARY.values()):
        w = s.workload.model_copy(update={"batch": int(batch)})
        row = whatif_evaluate(s.models[model], s.machine, w, {"storage": storage})
        rows.append({**row, "combo": {"storage": storage, "model": model, "batch": batch}})
    return rows


def test_the_grid_by_index_is_itertools_product_order():
    vary = {"a": ["x", "y"], "b": ["1", "2", "3"]}
    assert [combo_at(vary, i) for i in range(6)] == [dict(zip(vary, c)) for c in itertools.product(*vary.values())]
    assert index_of(vary, {"a": "y", "b": "1"}) == 3 and index_of(vary, {"a": "z", "b": "1"}) is None


def test_sweep_rows_equal_the_serial_answers(tiny, expected):
    rows = [r for chunk in run(tiny) for r in chunk]
    assert rows == expected and len(rows) == tiny.size == 4
    assert all(r["feasible"] for r in rows)


def test_sweep_on_a_two_worker_dask_cluster_equals_the_serial_answers(tiny, expected, capsys):
    """Two workers of a local cluster (threads: it starts in a second; benchmarks/bench_sweep.py runs processes),
    through the library and through `whatif --scheduler`."""
    distributed = pytest.importorskip("distributed")
    from planner.sweep_dask import backend
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc, \
            distributed.Client(lc) as c:
        rows = [r for chunk in run(tiny, backend(c)) for r in chunk]
        argv = ["whatif", "qwen3-14b", "--machine", "rtx3080-laptop", "--prompt-tokens", "64", "--new-tokens", "2",
                "--scheduler", lc.scheduler_address, "--json", *[f"--vary={k}={','.join(v)}" for k, v in VARY.items()]]
        assert main(argv) == 0
    key = lambda r: index_of(VARY, r["combo"])  # noqa: E731
    assert sorted(rows, key=key) == expected == json.loads(capsys.readouterr().out)["rows"]


def test_results_file_resumes_where_a_run_stopped(tmp_path, capsys, monkeypatch):
    out = tmp_path / "s.jsonl"
    argv = ["whatif", "llama-3.1-8b", "--machine", "rtx3080-laptop", "--vary", "storage=sata,nvme-gen4",
            "--vary", "context=64,512", "--new-tokens", "2", "--workers", "1", "--results", str(out), "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    lines = out.read_text().splitlines()
    assert len(lines) == 1 + 4 and json.loads(lines[0])["keys"] == ["context", "storage"]
    out.write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])  # stopped after two rows, mid-way through a third
    calls = []
    real = sweep_mod.evaluate_machine
    monkeypatch.setattr(sweep_mod, "evaluate_machine", lambda *a: calls.append(a[3]) or real(*a))
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert len(calls) == 2  # only the two combinations not in the file
    rows = [json.loads(x) for x in out.read_text().splitlines()[1:]]
    assert sorted(json.dumps(r["combo"], sort_keys=True) for r in rows) == sorted(
        json.dumps(r["combo"], sort_keys=True) for r in first["rows"])
    assert again["rows"] == first["rows"] and again["upgrades"] == first["upgrades"]


def test_a_results_file_of_other_fixed_inputs_is_refused(tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    out.write_text(json.dumps({"offloadsim_sweep": 1, "machine": "t4-cloud"}) + "\n")
    assert main(["whatif", "llama-3.1-8b", "--vary", "storage=sata", "--results", str(out)]) == 2
    assert "results: " in capsys.readouterr().err


def test_a_million_combinations_need_only_a_results_file(capsys):
    """A grid too large to hold is refused for the one thing that helps (a results file), not for its size."""
    vary = ["--vary", "gpu=rtx4090,rtx3090,a100-80gb,h100-pcie,l4",
            "--vary", "link=pcie3,pcie4,pcie5,pcie6", "--vary", "storage=sata,nvme-gen3,nvme-gen4,nvme-gen5,dc-gen5",
            "--vary", "ram=" + ",".join(f"{16 * k}GiB" for k in range(1, 21)),
            "--vary", "model=llama-3.1-8b,qwen3-14b", "--vary", "context=" + ",".join(str(2 ** k) for k in range(6, 16)),
            "--vary", "batch=" + ",".join(str(b) for b in range(1, 21))]
    assert main(["whatif", "llama-3.1-8b", *vary]) == 2
    err = capsys.readouterr().err
    assert "results: 800,000 combinations" in err and "--results FILE.jsonl" in err and "new-tokens" not in err


def test_sweep_refuses_a_grid_it_does_not_know():
    with pytest.raises(InputError, match="vary:"):
        Sweep({}, get_machine("rtx3080-laptop"), Workload(), {"colour": ["red"]})


def test_without_dask_the_sweep_runs_here_and_says_how_to_get_workers(capsys, monkeypatch):
    from offloadsim import commands_whatif
    from planner import sweep_dask
    monkeypatch.setattr(sweep_dask, "available", lambda: False)
    monkeypatch.setattr(commands_whatif, "LOCAL_CLUSTER_MIN", 1)  # a grid of two stands for a large one
    assert main(["whatif", "llama-3.1-8b", "--vary", "storage=sata,nvme-gen4", "--workers", "2", "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)["rows"]) == 2
    assert "in this process" in err and "pip install 'offloadsim[sweep]'" in err
    assert main(["whatif", "llama-3.1-8b", "--vary", "storage=sata", "--scheduler", "tcp://10.0.0.5:8786"]) == 2
    assert "scheduler: Dask is not installed" in capsys.readouterr().err
