"""Property-based fuzzing of the CLI: every argument and every field of every input file, given bad values.

Each case asserts: exit code 2, one line on stderr naming the field, no traceback, no file changed, done in time.
The CLI runs in-process (offloadsim.cli.main) for speed; OFFLOADSIM_DEBUG=1 makes any unexpected exception escape
as a real traceback, so a bug can never pass as a refusal. benchmarks/bench_fuzz.py runs >= 1,000 cases in
subprocesses under time and memory limits.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import resource
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwmodels import get_machine
from offloadsim.cli import main
from sim.model.resolve import load_model
from sim.plan import Budgets, Workload
from sim.engines.placements import get_policy

FAST = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TIME_LIMIT_S = 20.0
MEMORY_LIMIT_BYTES = 2 * 2**30  # growth of this process's peak RSS over the whole suite
START_RSS = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "torch_dtype": "bfloat16"}


def _safetensors(path: Path, tensors: dict[str, list[int]]) -> None:
    """A valid BF16 safetensors file of zeros (written by hand: no numpy or torch needed)."""
    header, off = {}, 0
    for name, shape in tensors.items():
        n = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(off))


def make_inputs(folder: Path) -> dict[str, Path]:
    """Valid inputs of every kind: config.json, a checkpoint folder, a plan, a machine profile."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "config.json"
    cfg.write_text(json.dumps(CONFIG))
    ckpt = folder / "ckpt"
    ckpt.mkdir(exist_ok=True)
    (ckpt / "config.json").write_text(json.dumps(CONFIG))
    tensors = {"model.embed_tokens.weight": [128, 64], "model.norm.weight": [64], "lm_head.weight": [128, 64]}
    for i in range(2):
        tensors |= {f"model.layers.{i}.self_attn.q_proj.weight": [64, 64], f"model.layers.{i}.mlp.up_proj.weight": [128, 64]}
    _safetensors(ckpt / "model.safetensors", tensors)
    machine = get_machine("rtx3080-laptop")
    model = load_model(str(cfg))
    w = Workload(batch=1, prompt_tokens=8, new_tokens=2)
    plan = get_policy("stream")(model, machine, w, Budgets.of(machine))
    plan_path = folder / "plan.json"
    plan.save(plan_path)
    profile = folder / "profile.json"
    profile.write_text(json.dumps({"machine": json.loads(machine.model_dump_json())}))
    return {"config": cfg, "ckpt": ckpt, "plan": plan_path, "profile": profile, "dir": folder}


def snapshot(folder: Path) -> dict[str, str]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if ".hypothesis" in p.parts:
            continue
        out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else "dir"
    return out


def run_cli(argv: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:  # pragma: no cover - main never lets one escape
            rc = exc.code
    return rc, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def assert_refused(argv: list, field: str, folder: Path) -> str:
    """Exit 2, one line naming `field`, no traceback, nothing in `folder` changed, within the time limit."""
    before = snapshot(folder)
    rc, out, err, secs = run_cli(argv)
    assert rc == 2, (argv, rc, err[-500:])
    assert "Traceback" not in err and err.startswith("offloadsim: error: "), (argv, err)
    assert err.count("\n") == 1 and err.endswith("\n"), (argv, err)
    assert field.lower() in err.lower(), (argv, field, err)
    assert snapshot(folder) == before, argv
    assert secs < TIME_LIMIT_S, (argv, secs)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - START_RSS < MEMORY_LIMIT_BYTES, argv
    return err


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    os.environ["OFFLOADSIM_DEBUG"] = "1"
    yield make_inputs(tmp_path_factory.mktemp("fuzz"))
    os.environ.pop("OFFLOADSIM_DEBUG", None)


# ---- bad values -------------------------------------------------------------------------------------------------
SIZE_WORDS = ["4XB", "nan", "inf", "-inf", "1e400GiB", "-4GiB", "", " ", "GiB", "4 G", "0x10GB", "4GiBs", "1e30GiB",
              "4,0GB", "four", "4GiB4", "--1GB", "1e-400", "NaNGB", "4iB"]
bad_sizes = st.sampled_from(SIZE_WORDS) | st.text(alphabet="xyzQ!@#%^&*()[]{}", min_size=1, max_size=6)
bad_ints = st.one_of(st.integers(max_value=0), st.integers(min_value=10**7, max_value=10**15))
bad_int_words = st.sampled_from(["1e7", "1.5", "x", "", "nan", "0x10", "1_0e3", "--1"])
bad_floats = st.sampled_from(["nan", "inf", "-inf", "-1", "1e400", "x", ""])


@FAST
@given(value=bad_sizes, which=st.sampled_from([("simulate", "--vram"), ("simulate", "--ram"), ("simulate", "--pinned"),
                                               ("plan", "--vram"), ("plan", "--ram"), ("pareto", "--ram"),
                                               ("info", "--unpack-speed")]))
def test_bad_sizes_and_speeds_are_refused(inputs, value, which):
    cmd, flag = which
    assert_refused([cmd, "qwen3-14b", flag, value], flag.lstrip("-"), inputs["dir"])


@pytest.mark.parametrize("flag, value", [("--vram", "40GiB"), ("--ram-budget", "200GiB"), ("--vram", "1TiB")])
def test_budgets_above_the_hardware_are_refused(inputs, flag, value):
    err = assert_refused(["simulate", "qwen3-14b", "--machine", "rtx3080-laptop", "--policy", "resident", flag, value],
                         flag.lstrip("-"), inputs["dir"])
    assert "more than" in err


COUNT_FLAGS = [("simulate", "--batch"), ("simulate", "--prompt-tokens"), ("simulate", "--new-tokens"),
               ("simulate", "--seed"), ("simulate", "--attribution"), ("plan", "--batch"), ("plan", "--new-tokens"),
               ("pareto", "--points"), ("whatif", "--workers"), ("whatif", "--batch"), ("whatif", "--new-tokens")]


@FAST
@given(value=bad_ints | bad_int_words, which=st.sampled_from(COUNT_FLAGS))
def test_bad_counts_are_refused(inputs, value, which):
    cmd, flag = which
    if flag == "--seed" and isinstance(value, int) and 0 <= value < 2**32:
        value = -1
    if flag == "--attribution" and isinstance(value, int) and 0 <= value <= 256:
        value = -1
    extra = ["--vary", "storage=sata"] if cmd == "whatif" else []
    assert_refused([cmd, "qwen3-14b", flag, value, *extra], flag.lstrip("-"), inputs["dir"])


@FAST
@given(value=bad_floats, which=st.sampled_from([("info", "--codec-ratio"), ("simulate", "--expert-skew"),
                                                ("plan", "--time-budget")]))
def test_bad_reals_are_refused(inputs, value, which):
    cmd, flag = which
    assert_refused([cmd, "qwen3-14b", flag, value], flag.lstrip("-"), inputs["dir"])


@FAST
@given(vary=st.sampled_from(["storage", "storage=", "storage=,", "=sata", "disk=sata", "storage=sata,sata",
                             "vram=4XB", "link=pcie9", "storage=nope", "ram=-1GiB", "cpu=", "gpu=h100,,"])
       | st.text(alphabet="=,abcs", max_size=8))
def test_malformed_vary_is_refused(inputs, vary):
    assert_refused(["whatif", "qwen3-14b", "--vary", vary], "vary", inputs["dir"])


def test_whatif_with_too_many_combinations_is_refused(inputs):
    sizes = ",".join(f"{g}GiB" for g in range(1, 26))    # 25 x 25 x 17 x 1000 = 10,625,000 > 10,000,000
    err = assert_refused(["whatif", "qwen3-14b", "--vary", f"vram={sizes}", "--vary", f"ram={sizes}",
                          "--vary", "storage=" + ",".join(f"s{k}" for k in range(17)),
                          "--vary", "batch=" + ",".join(str(b) for b in range(1, 1001))], "vary", inputs["dir"])
    assert "combinations" in err and "split the sweep" in err


# ---- files --------------------------------------------------------------------------------------------------------
def _bad_field_values(positive: bool):
    base = st.sampled_from([-1, -(10**12), 10**13, 1.5, "64", [], {}, True, None, "x" * 100])
    return base | st.just(0) if positive else base


INT_FIELDS = ["hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "vocab_size"]


@FAST
@given(field=st.sampled_from(INT_FIELDS), value=_bad_field_values(True))
def test_bad_config_fields_are_refused(inputs, tmp_path_factory, field, value):
    folder = tmp_path_factory.mktemp("cfg")
    cfg = dict(CONFIG)
    if value is None:
        del cfg[field]
    else:
        cfg[field] = value
    (folder / "config.json").write_text(json.dumps(cfg))
    assert_refused(["info", str(folder / "config.json")], field, folder)


@pytest.mark.parametrize("text, field", [
    ('{"model_type": "llama"', "config.json"), ("[" * 50000 + "]" * 50000, "config.json"), ("[]", "config.json"),
    (json.dumps(dict(CONFIG, quantization_config="fp8")), "quantization_config"),
    (json.dumps(dict(CONFIG, num_key_value_heads=3)), "num_key_value_heads"),
    (json.dumps(dict(CONFIG, model_type=["llama"])), "model_type"),
    (json.dumps(dict(CONFIG, num_hidden_layers=10**8)), "num_hidden_layers"),
    ("\xff\xfe", "config.json")])
def test_malformed_configs_are_refused(inputs, tmp_path, text, field):
    (tmp_path / "config.json").write_text(text, errors="surrogateescape") if "\xff" not in text else \
        (tmp_path / "config.json").write_bytes(b"\xff\xfe")
    assert_refused(["info", str(tmp_path / "config.json")], field, tmp_path)


PLAN_BAD = {"version": [2, "1"], "model": [1, None], "placements": [[], "x", [{"unit": "x", "tier": "vram"}]],
            "prefetch_depth": [-1, 65, "x", 1.5], "vram_slots": [0, -1, 65], "pinned_slots": [-1, 10**6],
            "reader_threads": [0, 100], "overlap_copy": ["maybe", [1]], "expert_predictor_hit_rate": [-0.1, 1.5],
            "gpu_offload_min_tokens": [0, -5], "feasible": [False, "maybe"], "codec": ["zstd", {"ratio": 2}],
            "surprise": [1]}


@FAST
@given(data=st.data())
def test_bad_plan_fields_are_refused(inputs, tmp_path_factory, data):
    field = data.draw(st.sampled_from(sorted(PLAN_BAD)))
    value = data.draw(st.sampled_from(PLAN_BAD[field]))
    folder = tmp_path_factory.mktemp("plan")
    plan = json.loads(inputs["plan"].read_text())
    plan[field] = value
    path = folder / "plan.json"
    path.write_text(json.dumps(plan))
    assert_refused(["simulate", str(inputs["config"]), "--plan", str(path), "--new-tokens", "2"],
                   "placements" if field == "placements" and value == [] else field, folder)


def _profile_fields() -> list[tuple[str, str]]:
    m = json.loads(get_machine("rtx3080-laptop").model_dump_json())
    return [(part, f) for part in ("gpu", "link", "storage", "host_memory", "cpu") for f, v in m[part].items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)]


@FAST
@given(where=st.sampled_from(_profile_fields()), value=st.sampled_from([-1, 0, "x", None, [], 1e-12, 1e30]))
def test_bad_profile_fields_are_refused(inputs, tmp_path_factory, where, value):
    part, field = where
    if field in ("year", "pcie_generation", "generation", "lanes", "cores", "unpack_threads", "queue_depth") \
            and value in (1e-12, 1e30):
        value = -1
    if field.endswith("_s") and not field.endswith("_per_s") and value == 0:
        value = -1
    folder = tmp_path_factory.mktemp("prof")
    prof = json.loads(inputs["profile"].read_text())
    prof["machine"][part][field] = value
    (folder / "p.json").write_text(json.dumps(prof))
    assert_refused(["info", "qwen3-14b", "--machine", str(folder / "p.json")], field, folder)


@FAST
@given(cut=st.integers(min_value=0, max_value=400), header_len=st.sampled_from([None, 10**15, 2**63, 7]))
def test_truncated_or_lying_safetensors_are_refused(inputs, tmp_path_factory, cut, header_len):
    folder = tmp_path_factory.mktemp("st")
    (folder / "config.json").write_text(json.dumps(CONFIG))
    good = (inputs["ckpt"] / "model.safetensors").read_bytes()
    blob = good[:cut]
    if header_len is not None:
        blob = header_len.to_bytes(8, "little") + good[8:]
    (folder / "model.safetensors").write_bytes(blob)
    assert_refused(["info", str(folder)], "checkpoint", folder)


def test_tensor_larger_than_its_file_is_refused(inputs, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    _safetensors(tmp_path / "model.safetensors", {"model.embed_tokens.weight": [128, 64]})
    raw = (tmp_path / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header["model.embed_tokens.weight"]["shape"] = [10**7, 10**8]
    text = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])
    assert_refused(["info", str(tmp_path)], "checkpoint", tmp_path)


# ---- outputs ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, field", [
    (["simulate", "{config}", "--trace", "{plan}", "--plan", "{plan}"], "trace"),
    (["simulate", "{config}", "--trace", "/nonexistent-dir/t.json"], "trace"),
    (["simulate", "{config}", "--gantt", "{dir}"], "gantt"),
    (["simulate", "{config}", "--trace", "/proc/self/t.json"], "trace"),
    (["simulate", "{config}", "--trace", "{dir}/t.json", "--gantt", "{dir}/t.json"], "gantt"),
    (["plan", "{config}", "--out", "{config}"], "out"),
    (["plan", "{config}", "--out", "/nonexistent-dir/p.json"], "out"),
    (["pareto", "{config}", "--chart", "/nonexistent-dir/p.png"], "chart"),
    (["whatif", "{config}", "--vary", "storage=sata", "--plot", "/nonexistent-dir/w.png"], "plot"),
    (["calibrate", "--out", "/nonexistent-dir/p.json"], "out"),
    (["make-checkpoint", "--preset", "qwen3-14b", "--layers", "1", "--out", "{ckpt}"], "out"),
])
def test_outputs_are_refused_before_any_work(inputs, argv, field):
    argv = [a.format(**{k: str(v) for k, v in inputs.items()}) for a in argv]
    assert_refused(argv, field, inputs["dir"])


def test_infeasible_plan_exits_2_and_keeps_the_old_plan(inputs):
    before = inputs["plan"].read_bytes()
    err = assert_refused(["plan", str(inputs["config"]), "--vram", "100KiB", "--out", str(inputs["plan"])], "budget",
                         inputs["dir"])
    assert inputs["plan"].read_bytes() == before and "no plan fits" in err


@pytest.mark.parametrize("argv", [["make-checkpoint", "--preset", "qwen3-14b", "--out", "x"], ["calibrate"],
                                  ["validate", "--checkpoint", "x", "--plan", "stream"]])
def test_torch_only_commands_without_torch_say_how_to_install(inputs, monkeypatch, argv):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    err = assert_refused(argv, "torch", inputs["dir"])
    assert "pip install -e '.[validate]'" in err


@pytest.mark.parametrize("store_json, field", [("{", "store"), ('{"units": 3}', "store"), ("[]", "store"),
                                               ('{"units": {}}', "store")])
def test_corrupt_store_is_refused(inputs, tmp_path, store_json, field):
    pytest.importorskip("torch")
    store = tmp_path / "store"
    store.mkdir()
    (store / "store.json").write_text(store_json)
    assert_refused(["validate", "--checkpoint", str(inputs["ckpt"]), "--plan", "stream", "--store", str(store),
                    "--device", "cpu", "--out", str(tmp_path / "rep")], field, tmp_path)


def test_store_pointing_at_a_file_is_refused(inputs, tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "f").write_text("x")
    assert_refused(["validate", "--checkpoint", str(inputs["ckpt"]), "--plan", "stream", "--store", str(tmp_path / "f"),
                    "--device", "cpu", "--out", str(tmp_path / "rep")], "store", tmp_path)


def test_cuda_without_cuda_is_refused(inputs, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert_refused(["validate", "--checkpoint", str(inputs["ckpt"]), "--plan", "stream", "--device", "cuda",
                    "--out", str(tmp_path / "rep")], "device", tmp_path)
