"""validate runs every plan the planner and the baselines make, on a tiny random checkpoint on the CPU: each exits
0 with bit-identical tokens and a report of valid JSON (no NaN) whose times are finite."""
import json
import math

import pytest

torch = pytest.importorskip("torch")

from offloadsim.cli import main  # noqa: E402
from hwmodels import get_machine  # noqa: E402
from planner.baselines import BASELINES  # noqa: E402
from sim.engines.placements import POLICIES  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402
from sim.plan import Budgets, Workload  # noqa: E402

TINY = ["--layers", "2", "--hidden", "64", "--intermediate", "128", "--heads", "4", "--kv-heads", "2", "--vocab", "256"]
RUN = ["--device", "cpu", "--prompt-tokens", "4", "--new-tokens", "2", "--json"]


def _strict(text: str):
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON output"))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("ck") / "tiny"
    assert main(["make-checkpoint", "--preset", "llama-3.1-8b", *TINY, "--out", str(out)]) == 0
    return out


def _plans(ckpt, folder, capsys) -> dict[str, str]:
    """Every policy by name, every baseline's plan and the planner's own plan as files."""
    plans = {name: name for name in POLICIES}
    shape, machine = load_model(str(ckpt)), get_machine("h200-testbox")
    w = Workload(batch=1, prompt_tokens=4, new_tokens=2)
    for name, fn in BASELINES.items():
        path = folder / f"{name}.json"
        fn(shape, machine, w, Budgets.of(machine)).save(path)
        plans[f"baseline {name}"] = str(path)
    path = folder / "planner.json"
    assert main(["plan", str(ckpt), "--machine", "h200-testbox", "--prompt-tokens", "4", "--new-tokens", "2",
                 "--out", str(path), "--time-budget", "0.5"]) == 0
    plans["planner"] = str(path)
    capsys.readouterr()
    return plans


def test_validate_runs_every_plan_the_planner_can_make(ckpt, tmp_path, capsys, monkeypatch):
    import validate.report
    monkeypatch.setattr(validate.report, "overlay_gantt", lambda *a: None)  # the figure: tested in test_validate
    plans = _plans(ckpt, tmp_path, capsys)
    assert {"airllm", "accelerate", "llamacpp", "stream", "resident", "baseline density", "planner"} <= set(plans)
    for name, plan in plans.items():
        out = tmp_path / f"rep-{name.replace(' ', '-')}"
        rc = main(["validate", "--checkpoint", str(ckpt), "--plan", plan, *RUN, "--out", str(out),
                   "--store", str(tmp_path / "store")])
        got = capsys.readouterr()
        assert rc == 0, (name, got.err)
        rep = _strict(got.out)
        assert rep["exactness"]["tokens_identical"], name
        assert math.isfinite(rep["measured"]["time_per_token_s"]) and rep["predicted"]["time_per_token_s"] > 0, name
        _strict((out / "report.json").read_text())
