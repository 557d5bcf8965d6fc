"""A fixed sample of the hostile classes of tests/fuzz_hostile.py, in-process: GGUF damage, llama-bench fields and
files, every number of a profile, a plan's codec, existing and unnameable outputs, names with control characters
and edge requests answered in JSON. Each refusal is exit 2 and one sentence naming the field; each answer exit 0,
valid JSON with --json, finite and free of control characters; no file of the case's folder changed or left
behind. benchmarks/bench_fuzz.py runs >= 1,000 of these in their own processes."""
from __future__ import annotations

import contextlib
import io
import os
import random

import pytest

from offloadsim.cli import main
from tests.fuzz_hostile import answer_problems, generators, hostile_inputs
from tests.test_fuzz_cli import make_inputs, snapshot

PER_CLASS = 3


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    os.environ["OFFLOADSIM_DEBUG"] = "1"  # an unexpected exception escapes as a traceback: never passes as a refusal
    yield hostile_inputs(make_inputs(tmp_path_factory.mktemp("hostile")))
    os.environ.pop("OFFLOADSIM_DEBUG", None)


def _cases(inp) -> list[dict]:
    rng = random.Random(7)
    return [dict(gen(), category=gen.__name__) for gen in generators(rng, inp) for _ in range(PER_CLASS)]


def test_hostile_sample_is_refused_or_answered_cleanly(inputs, tmp_path, monkeypatch):
    import importlib.util
    torchless = importlib.util.find_spec("torch") is None
    for k, case in enumerate(_cases(inputs)):
        if case["argv"][0] in ("calibrate", "validate") and torchless:
            continue
        folder = tmp_path / f"case{k}"
        folder.mkdir()
        for name, data in case.get("files", {}).items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        before = snapshot(folder)
        monkeypatch.chdir(folder)
        o, e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            rc = main(list(case["argv"]))
        out, err = o.getvalue(), e.getvalue()
        what = (case["category"], case["argv"], rc, err[-300:])
        assert rc in case.get("expect", (2,)), what
        assert snapshot(folder) == before, what
        if rc == 2:
            assert err.startswith("offloadsim: error: ") and err.count("\n") == 1, what
            assert case["field"].lower() in err.lower(), what
        else:
            assert not answer_problems(case["argv"], out), (what, answer_problems(case["argv"], out))


@pytest.mark.parametrize("argv", [["simulate", "{config}", "--new-tokens", "2", "--gantt", "g.png"],
                                  ["pareto", "{config}", "--points", "2", "--out", "p.png"],
                                  ["plan", "{config}", "--time-budget", "0.2", "--out", "p.json"]])
def test_a_full_disk_leaves_no_file_and_names_the_output(inputs, tmp_path, monkeypatch, argv):
    import errno
    import tempfile

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "replace", full)  # the last step of every atomic write: the bytes did not all land
    monkeypatch.chdir(tmp_path)
    e = io.StringIO()
    with contextlib.redirect_stderr(e), contextlib.redirect_stdout(io.StringIO()):
        rc = main([a.format(config=inputs["config"]) for a in argv])
    assert rc == 2 and argv[-1] in e.getvalue() and "No space left" in e.getvalue()
    assert list(tmp_path.iterdir()) == [] and tempfile.gettempdir()
