"""Engines are plug-ins: discovered from their packages, asked by the schedule (never named by it), their costs
carried by the machine as raw values each engine validates, and an engine's folder deleted removes that engine only."""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hwmodels import get_machine
from hwmodels.units import InputError
from sim.engines import costs_of, engine_names, engines, with_costs
from sim.engines.base import LEGACY_DEFAULTS
from sim.model.resolve import load_model
from sim.engines.placements import POLICIES
from sim.plan import Budgets, Workload
from sim.run.simulate import fast_simulate

ROOT = Path(__file__).resolve().parent.parent
W = Workload(batch=1, prompt_tokens=16, new_tokens=3)


def test_the_registry_finds_every_engine_package_offloadsims_first():
    assert engine_names() == ["offloadsim", "accelerate", "llamacpp", "airllm"]
    assert sum(e.plans_itself for e in engines().values()) == 1  # the planner's own engine


def _literals(path: Path) -> list[str]:
    names = set(engine_names())
    tree = ast.parse(path.read_text())
    return [f"{path.name}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names]


def test_the_schedule_builder_names_no_engine():
    """The schedule (and the compute costs it asks) asks the plan's engine: no engine's name, no `peer is None`."""
    for f in ("sim/run/schedule.py", "sim/run/steps.py", "sim/costs/compute.py"):
        path = ROOT / f
        assert _literals(path) == []
        assert "peer is None" not in path.read_text() and "engine ==" not in path.read_text()


def test_the_simulators_core_names_no_engine():
    """sim/run, sim/costs, sim/analysis and sim/model hold no engine's name (a Chrome trace's process is named after
    the product, sim/run/events.py)."""
    found = [x for d in ("sim/run", "sim/costs", "sim/analysis", "sim/model")
             for f in sorted((ROOT / d).rglob("*.py")) for x in _literals(f) if f.name != "events.py"]
    assert found == []


def test_every_engine_cost_in_the_presets_has_its_own_source():
    m = get_machine("h200-testbox")
    assert set(m.peers) == {"accelerate", "airllm", "llamacpp"}
    for engine, values in m.peers.items():
        for field in values:
            assert m.sources[f"peers.{engine}.{field}"].startswith(("[M]", "[D]")), (engine, field)
        costs_of(m, engine)  # each validates as its engine's typed costs


def _legacy_dump(m) -> dict:
    """The machine's engine costs as a profile written with one flat model held them: every field for every
    engine, one source string each."""
    out = {}
    for engine in m.peers:
        costs = costs_of(m, engine).model_dump()
        out[engine] = {**LEGACY_DEFAULTS, **{k: v for k, v in costs.items() if k in LEGACY_DEFAULTS},
                       "source": "[M] measured, one string"}
    return out


@pytest.mark.parametrize("policy", ["accelerate", "airllm", "llamacpp"])
def test_a_profile_of_the_flat_format_loads_and_prices_identically(tmp_path, policy):
    m = get_machine("h200-testbox")
    data = m.model_dump()
    data["peers"] = _legacy_dump(m)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"machine": data}))
    from hwmodels.presets import load_machine
    old = load_machine(str(path))
    model = load_model("llama-3.1-8b")
    b = Budgets.of(m, vram=6 * 2**30)
    plan = POLICIES[policy](model, m, W, b)
    assert fast_simulate(model, old, plan, W, b) == fast_simulate(model, m, plan, W, b)


def test_an_unknown_engine_or_cost_field_in_a_profile_is_refused_by_name():
    m = get_machine("desktop-4090")
    with pytest.raises(InputError, match="'vllm' in machine .* is no installed engine"):
        costs_of(m.model_copy(update={"peers": {"vllm": {"step_s": 1.0}}}), "accelerate")
    with pytest.raises(InputError, match="peers.accelerate: unknown cost field 'gpu_row_s'"):
        costs_of(with_costs(m, "accelerate", {"gpu_row_s": 1e-9}), "accelerate")
    with pytest.raises(InputError, match="peers.llamacpp.cpu_op_s: -1.0 is not valid"):
        costs_of(with_costs(m, "llamacpp", {"cpu_op_s": -1.0}), "llamacpp")


def test_an_unknown_cost_field_is_one_sentence_from_the_cli(tmp_path, capsys):
    from offloadsim.cli import main
    data = get_machine("desktop-4090").model_dump()
    data["peers"] = {"airllm": {"load_unit_s": 0.1, "cleanup_s": 0.2}}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"machine": data}))
    assert main(["simulate", "llama-3.1-8b", "--machine", str(path), "--policy", "airllm", "--new-tokens", "2"]) != 0
    err = capsys.readouterr().err.strip()
    assert "unknown cost field 'cleanup_s'" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_calibrate_times_only_the_engines_asked_and_refuses_one_it_cannot_time(capsys):
    from offloadsim.cli import main
    assert main(["calibrate", "--quick", "--model", "llama-3.1-8b", "--peer", "llamacpp"]) != 0
    assert "calibrate does not time llamacpp's costs; give one of accelerate, airllm" in capsys.readouterr().err
    assert main(["calibrate", "--quick", "--model", "llama-3.1-8b", "--peer", "vllm"]) != 0
    assert "engine: unknown name 'vllm'" in capsys.readouterr().err
    from validate.calibrate import _measure
    import inspect
    assert inspect.signature(_measure).parameters["peers"].default == ()  # none unless asked


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return _run(cwd, "-m", "offloadsim", *args)


# imports every module of validate (but its accuracy page: llama.cpp's and Accelerate's recorded runs) with torch
# made unimportable; prints the modules imported and those that stopped at importing torch
IMPORT_VALIDATE = """
import importlib, json, pkgutil, sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "torch":
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
sys.meta_path.insert(0, NoTorch())
import validate
got = {"imported": [], "torch": []}
for m in pkgutil.iter_modules(validate.__path__, "validate."):
    if m.name == "validate.accuracy":
        continue
    try:
        importlib.import_module(m.name)
        got["imported"].append(m.name)
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        got["torch"].append(m.name)
print(json.dumps(got))
"""


def test_deleting_an_engines_folder_removes_that_engine_and_nothing_else(tmp_path):
    for pkg in ("hwmodels", "sim", "planner", "validate", "offloadsim"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for gone in ("airllm", "llamacpp"):
        shutil.rmtree(tmp_path / "sim" / "engines" / gone)
    common = ["--machine", "desktop-4090", "--new-tokens", "3", "--json"]
    for args in (["simulate", "llama-3.1-8b", "--policy", "stream", *common],
                 ["simulate", "llama-3.1-8b", "--policy", "accelerate", *common],
                 ["plan", "llama-3.1-8b", "--vram", "6GiB", "--time-budget", "30", *common],
                 ["plan", "llama-3.1-8b", "--vram", "6GiB", "--engine", "accelerate", "--export", "accelerate",
                  *common]):
        got = _cli(tmp_path, *args)
        assert got.returncode == 0, (args, got.stderr[-2000:])
    engines_seen = json.loads(_cli(tmp_path, "plan", "llama-3.1-8b", "--vram", "6GiB", *common).stdout)["engines"]
    assert set(engines_seen) == {"offloadsim", "accelerate"}
    for args in (["simulate", "llama-3.1-8b", "--policy", "llamacpp", *common],
                 ["plan", "llama-3.1-8b", "--vram", "6GiB", "--engine", "airllm", *common]):
        got = _cli(tmp_path, *args)
        assert got.returncode != 0 and "Traceback" not in got.stderr, got.stderr[-2000:]
        assert len(got.stderr.strip().splitlines()) == 1  # the CLI's --engine choices are the folders left
        assert "unknown name" in got.stderr or "invalid choice: 'airllm' (choose from 'accelerate', 'offloadsim')" \
            in got.stderr, got.stderr
    # calibration: the generic fit imports without the engines' folders; calibrate-peer (llama.cpp's) refuses
    got = _cli(tmp_path, "calibrate-peer", "llama-3.1-8b", "--bench", "bench.json")
    assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr[-2000:]
    assert "calibrate-peer: the llama.cpp engine is not installed" in got.stderr, got.stderr
    got = _cli(tmp_path, "calibrate", "--quick", "--model", "llama-3.1-8b", "--peer", "llamacpp", "--dir", ".")
    assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr[-2000:]
    assert "unknown name" in got.stderr and "llamacpp" in got.stderr, got.stderr
    got = _run(tmp_path, "-c", IMPORT_VALIDATE)
    assert got.returncode == 0, got.stderr[-2000:]
    found = json.loads(got.stdout)
    assert {"validate.peer_calibration", "validate.accepted", "validate.archs", "validate.checkpoint"} \
        <= set(found["imported"]), found
    assert "validate.model" in found["torch"], found  # torch was out of reach: what needs it stopped there
