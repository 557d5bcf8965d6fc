"""`offloadsim run` on the CPU: a tiny random Llama checkpoint with its own small tokenizer (make-checkpoint writes
both), a plan that streams, computes on the CPU and keeps weights resident. Greedy tokens equal transformers'
`generate`; a seed reproduces a sampled text; a stop token ends the run; bad inputs get one sentence."""
import io
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from hwmodels import get_machine  # noqa: E402
from offloadsim.cli import main  # noqa: E402
from sim.costs.equations import machine_codec  # noqa: E402
from sim.engines.common import make_plan  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402

TINY = ["--layers", "3", "--hidden", "64", "--intermediate", "128", "--heads", "4", "--kv-heads", "2", "--vocab", "256"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "tiny-llama"
    assert main(["make-checkpoint", "--preset", "llama-3.1-8b", *TINY, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def plan_file(ckpt) -> Path:
    """Embedding resident, layer 0 streamed from pinned RAM, layer 1 on the CPU, layer 2 compressed, head streamed."""
    shape = load_model(str(ckpt))
    names = [u.name for u in shape.units]
    tiers = dict(zip(names, ["vram", "ram_pinned", "ram_pageable", "ram_compressed", "ram_pinned"]))
    machine = get_machine("rtx3080-laptop")
    plan = make_plan(shape, machine, "mixed", tiers, {names[2]: "cpu"}, codec=machine_codec(machine))
    path = ckpt.parent / "plan.json"
    plan.save(path)
    return path


@pytest.fixture(scope="module")
def runner(ckpt, plan_file):
    from validate.runner import Runner
    return Runner.load(ckpt, plan_file, device="cpu")


def test_greedy_tokens_equal_transformers_generate(ckpt, runner):
    from transformers import AutoModelForCausalLM
    from validate.sampling import Sampling
    out = runner.generate("The cat sat", max_new_tokens=8, sampling=Sampling())
    hf = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16)
    ids = torch.tensor([runner.tokenizer("The cat sat")["input_ids"]])
    with torch.no_grad():
        ref = hf.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1]:].tolist()
    eos = runner.tokenizer.eos_token_id
    assert out.token_ids == [t for t in ref if t != eos][:len(out.token_ids)]
    assert out.token_ids == ref[:len(out.token_ids)] and (out.stopped or len(out.token_ids) == 8)
    assert out.text == runner.tokenizer.decode(out.token_ids, skip_special_tokens=True)


def test_a_seed_reproduces_a_sampled_text_and_streams_it(runner):
    from validate.sampling import Sampling
    streams = [io.StringIO(), io.StringIO()]
    a, b = (runner.generate("Hello", 10, Sampling(1.0, 0.9, seed=7), stream=s, ignore_eos=True) for s in streams)
    c = runner.generate("Hello", 10, Sampling(1.0, 0.9, seed=8), ignore_eos=True)
    greedy = runner.generate("Hello", 10, ignore_eos=True)
    assert a.token_ids == b.token_ids and len(a.token_ids) == 10
    assert a.token_ids != c.token_ids and a.token_ids != greedy.token_ids  # 10 draws from ~256 tokens
    assert streams[0].getvalue() == a.text + "\n"  # the text written as made, then a newline


def test_a_stop_token_ends_the_run_without_it(runner):
    """The stage threads stop with the run: the next call on the same engine makes its tokens as before."""
    full = runner.generate("Once upon", max_new_tokens=8, ignore_eos=True)
    runner.stop_ids = lambda: frozenset({full.token_ids[3]})
    cut = runner.generate("Once upon", max_new_tokens=8)
    del runner.stop_ids
    k = full.token_ids.index(full.token_ids[3])
    assert cut.stopped and cut.token_ids == full.token_ids[:k]
    assert runner.generate("Once upon", max_new_tokens=8, ignore_eos=True).token_ids == full.token_ids


def test_prediction_is_for_the_request_made(runner):
    out = runner.generate("abc", max_new_tokens=4)
    steps = len(out.token_ids) + (1 if out.stopped else 0)
    assert out.predicted == runner.predict(out.prompt_tokens, max(steps, 1))
    assert out.predicted["ttft_s"] > 0 and out.ttft_s > 0


def test_chat_template_wraps_the_prompt(runner):
    ids = runner.encode("Hi", chat=True)
    assert runner.tokenizer.decode(ids) == "<|user|>Hi\n<|assistant|>"


def _one_sentence(capsys, argv: list[str], field: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"offloadsim: error: {field}:") and "\n" not in err and "Traceback" not in err
    return err


def test_bad_inputs_get_one_sentence(ckpt, plan_file, tmp_path, capsys):
    run = ["run", str(ckpt), "--device", "cpu"]
    assert "does not exist" in _one_sentence(capsys, run + ["--plan", str(tmp_path / "no.json"), "--prompt", "x"], "plan")
    other = json.loads(plan_file.read_text())
    other["placements"] = other["placements"][:-1]
    other["model"] = "another-model"
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert "another-model" in _one_sentence(capsys, run + ["--plan", str(tmp_path / "other.json"), "--prompt", "x"],
                                            "plan")
    assert "empty" in _one_sentence(capsys, run + ["--plan", str(plan_file), "--prompt", "  "], "prompt")
    (tmp_path / "elsewhere.json").write_text(json.dumps(dict(json.loads(plan_file.read_text()), machine="my-box")))
    assert "give --machine" in _one_sentence(capsys, run + ["--plan", str(tmp_path / "elsewhere.json"), "--prompt",
                                                            "x"], "machine")
    _one_sentence(capsys, run + ["--plan", str(plan_file), "--prompt", "x", "--top-p", "0"], "top-p")
    _one_sentence(capsys, run + ["--plan", str(plan_file), "--prompt", "x", "--temperature", "-1"], "temperature")


def test_cli_run_json(ckpt, plan_file, capsys):
    assert main(["run", str(ckpt), "--plan", str(plan_file), "--prompt", "Hello", "--max-new-tokens", "3",
                 "--device", "cpu", "--machine", "rtx3080-laptop", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["prompt_tokens"] == 5 and 0 <= data["new_tokens"] <= 3
    assert data["predicted"]["machine"] == "rtx3080-laptop" and data["measured"]["time_per_token_s"] > 0
