"""`offloadsim plan --engine`: the plan an engine can run, its times, every engine compared, exports it can take."""
import json

import pytest

from sim.engines import costs_of, engine_names, with_costs
from offloadsim.cli import main
from sim.plan import Plan

BASE = ["plan", "llama-3.1-8b", "--machine", "h200-testbox", "--vram", "8GiB", "--new-tokens", "3",
        "--prompt-tokens", "16", "--batch", "1"]
ACCELERATE_TIERS = {"vram", "ram_pageable", "disk_raw"}


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def check_engines_block(data: dict, engine: str) -> None:
    from hwmodels import get_machine
    from planner.engines import ENGINES
    assert set(data["engines"]) == set(ENGINES)
    assert data["engines"][engine]["time_per_token_s"] == pytest.approx(data["time_per_token_s"])
    best = data["engines"]["offloadsim"]["time_per_token_s"]
    base = get_machine(BASE[BASE.index("--machine") + 1])
    own_kernels = {n for n in engine_names() if getattr(costs_of(base, n), "cpu_bytes_per_s", None)}
    for name, row in data["engines"].items():  # offloadsim's planner can run every peer's placement: never slower
        if name in own_kernels:  # than a peer on the same torch kernels; one with its own CPU kernels may win
            continue
        assert "error" in row or row["time_per_token_s"] >= best * (1 - 1e-9), (name, row, best)


def test_accelerate_json_plan_and_export(capsys, tmp_path):
    rc, out, err = run(capsys, *BASE, "--engine", "accelerate", "--json", "--export", "accelerate",
                       "--out", str(tmp_path / "p.json"))
    assert rc == 0, err
    data = json.loads(out)
    assert data["engine"] == "accelerate" and data["feasible"]
    assert data["time_per_token_s"] > 0 and data["ttft_s"] > 0 and isinstance(data["notes"], list)
    check_engines_block(data, "accelerate")
    assert data["time_per_token_s"] >= data["engines"]["offloadsim"]["time_per_token_s"] * (1 - 1e-9)
    plan = Plan.load(tmp_path / "p.json")
    assert plan.engine == "accelerate"
    assert {p.tier for p in plan.placements} <= ACCELERATE_TIERS
    assert any(p.tier != "vram" for p in plan.placements)  # 8 GiB cannot hold the 15 GiB model
    # Accelerate computes on the GPU when anything is there, else the whole model on the CPU
    assert len({p.compute for p in plan.placements}) == 1
    assert {p.compute for p in plan.placements} == ({"gpu"} if any(p.tier == "vram" for p in plan.placements) else {"cpu"})
    assert {r["tier"] for r in data["layers"]} == {p.tier for p in plan.placements}
    assert set(data["export"]["device_map"].values()) <= {0, "cpu", "disk"}


def _entry(lines: list[str], label: str) -> list[str]:
    """An engine's lines under 'what to run': its time, then its command or code (indented six)."""
    k = next(k for k, line in enumerate(lines) if line.startswith(f"  {label} ") and "s per token" in line)
    rest = []
    for line in lines[k + 1:]:
        if not line.startswith("      "):
            break
        rest.append(line.strip())
    return [lines[k]] + rest


def test_accelerate_text(capsys):
    rc, out, err = run(capsys, *BASE, "--engine", "accelerate")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[1].startswith("what to run: each engine's fastest placement")
    assert any(line.startswith("Accelerate (--engine accelerate): ") and "s per token" in line for line in lines)
    assert any(line.startswith("placement: ") for line in lines)
    acc = _entry(lines, "Accelerate")
    assert acc[1] == "from transformers import AutoModelForCausalLM, AutoTokenizer"
    assert acc[2].startswith("device_map = {") and any("from_pretrained('CHECKPOINT', device_map=device_map" in c
                                                       for c in acc)
    assert any(line.startswith("pick ") for line in lines)


def test_llamacpp_plan_computes_off_gpu_units_on_the_cpu(capsys, tmp_path):
    rc, out, err = run(capsys, *BASE, "--engine", "llamacpp", "--json", "--export", "llamacpp",
                       "--out", str(tmp_path / "p.json"))
    assert rc == 0, err
    data = json.loads(out)
    assert data["engine"] == "llamacpp"
    check_engines_block(data, "llamacpp")
    plan = Plan.load(tmp_path / "p.json")
    assert plan.engine == "llamacpp"
    assert any(p.tier != "vram" for p in plan.placements)
    assert all(p.compute == "cpu" for p in plan.placements if p.tier != "vram")
    assert all(p.compute == "gpu" for p in plan.placements if p.tier == "vram")
    # a -ngl plan exports as that -ngl: the output and the last blocks on the GPU, no -ot for blocks
    planned = plan.policy.rsplit("-ngl ", 1)[1].rstrip(")")
    assert data["export"]["args"][:2] == ["-ngl", planned] and not any("blk" in r for r in data["export"]["ot"])


@pytest.mark.parametrize("engine, export", [("airllm", "accelerate"), ("airllm", "llamacpp"),
                                            ("accelerate", "llamacpp"), ("llamacpp", "accelerate")])
def test_export_the_engine_cannot_take_is_refused(capsys, tmp_path, engine, export):
    rc, out, err = run(capsys, *BASE, "--engine", engine, "--export", export, "--out", str(tmp_path / "p.json"))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("offloadsim: error: export:"), err
    assert engine in err and "Traceback" not in err
    assert not (tmp_path / "p.json").exists()


def test_engine_that_cannot_run_fails_in_one_line(capsys, tmp_path):
    rc, out, err = run(capsys, *BASE[:4], "--vram", "100MiB", "--new-tokens", "3", "--prompt-tokens", "16",
                       "--engine", "airllm", "--out", str(tmp_path / "p.json"))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("offloadsim: error: budget: airllm cannot run"), err
    assert not (tmp_path / "p.json").exists()


def test_unknown_engine_is_rejected_by_argparse(capsys):
    rc, out, err = run(capsys, *BASE, "--engine", "vllm")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "--engine" in err and "invalid choice: 'vllm'" in err


def test_engine_choices_match_the_planner():
    """The CLI lists the engines' folders without importing them: the same engines the registry finds."""
    from offloadsim.args_plan import ENGINES as choices
    from planner.engines import ENGINES
    assert sorted(choices) == sorted(ENGINES) and len(choices) == len(ENGINES)


@pytest.mark.parametrize("export", ["airllm", "offloadsim"])
def test_an_export_as_an_engine_that_takes_no_arguments_is_refused(capsys, export):
    rc, out, err = run(capsys, *BASE, "--export", export)
    assert rc == 2 and out == ""
    assert err.startswith("offloadsim: error: export: ") and err.count("\n") == 1, err
    assert "takes no placement as arguments; export as one of accelerate, llamacpp." in err


def test_a_plan_naming_an_engine_not_installed_is_refused_in_one_sentence(capsys, tmp_path):
    """The plan file keeps any well-formed engine name; running it asks the registry, which refuses it."""
    path = tmp_path / "p.json"
    main(["plan", *BASE[1:], "--out", str(path)])
    data = json.loads(path.read_text())
    assert data["engine"] == "offloadsim"
    path.write_text(json.dumps(dict(data, engine="vllm")))
    assert Plan.load(path).engine == "vllm"
    capsys.readouterr()
    rc, out, err = run(capsys, "simulate", "llama-3.1-8b", "--machine", "h200-testbox", "--plan", str(path),
                       "--vram", "8GiB", "--new-tokens", "3", "--prompt-tokens", "16")
    assert rc != 0 and out == "" and err.count("\n") == 1, err
    assert err.startswith("offloadsim: error: engine: unknown name 'vllm'") and "Traceback" not in err


def test_default_plan_leads_with_what_to_run(capsys):
    """Each engine: its time and the command or code that runs it; then one line naming the pick; then the planner's
    details and the baselines, each term explained where it is printed."""
    rc, out, err = run(capsys, *BASE)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("llama-3.1-8b on h200-testbox: VRAM 8.00 GiB")
    assert lines[1].startswith("what to run: each engine's fastest placement at these budgets")
    ours = _entry(lines, "offloadsim's engine")
    assert ours[1] == "offloadsim run CHECKPOINT --plan plan.json --prompt 'Hello' --max-new-tokens 3"
    assert "save the plan first" in ours[2]
    assert _entry(lines, "llama.cpp")[1].startswith("llama-cli -m MODEL.gguf -ngl ")
    assert _entry(lines, "Accelerate")[1].startswith("from transformers import")
    assert _entry(lines, "AirLLM")[1:3] == ["from airllm import AutoModel",
                                            "model = AutoModel.from_pretrained('CHECKPOINT')"]
    picks = [line for line in lines if line.startswith("pick ")]
    assert len(picks) == 1 and lines.index(picks[0]) < next(k for k, x in enumerate(lines) if x.startswith("the planner"))
    gap = next(line for line in lines if "lower bound on the request" in line)
    assert "gap" in gap and "no plan can beat" in gap
    for name in ("airllm", "accelerate", "llamacpp", "density", "resident", "stream"):  # the baselines, described
        assert any(line.startswith(f"  {name:<11} ") and ("the planner)" in line or "cannot run" in line)
                   for line in lines), name
    assert any(line.startswith("  accelerate ") and 'device_map="auto"' in line for line in lines)
    assert any(line.startswith("  density ") and "traffic density" in line for line in lines)


def test_pick_names_the_fastest_runnable_engine_or_says_it_is_close():
    from types import SimpleNamespace
    from offloadsim.plan_text import pick_line
    plans = {n: SimpleNamespace(time_per_token_s=t) for n, t in
             (("offloadsim", 1.0), ("llamacpp", 1.05), ("accelerate", 2.5))}
    assert pick_line(plans, ["offloadsim", "llamacpp", "accelerate"]).startswith(
        "pick offloadsim's engine or llama.cpp: predicted within 5% of each other")
    assert pick_line(plans, ["llamacpp", "accelerate"]) == (
        "pick llama.cpp: predicted 2.38x faster than Accelerate, the next fastest, at these budgets.")
    assert pick_line(plans, []).startswith("pick: none of the engines can run this model")


def test_device_map_source_is_the_same_map_in_few_lines():
    from sim.engines.accelerate.snippet import device_map_source
    dm = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": "cpu", "model.layers.2": "cpu",
          "model.layers.3": "cpu", "model.layers.4": "disk", "model.norm": "disk", "lm_head": "disk"}
    src = device_map_source(dm)
    assert "range(1, 4)" in src and src.count("model.layers") == 3
    got = eval(src)
    assert got == dm and list(got) == list(dm)


def test_default_engine_json_keeps_keys_and_adds_engines(capsys):
    rc, out, err = run(capsys, *BASE, "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert {"feasible", "reason", "model", "machine", "time_per_token_s", "ttft_s", "total_s", "lower_bound_total_s",
            "gap_to_lower_bound", "planning_s", "converged", "stopped", "evaluations", "chosen_from", "baselines",
            "baseline_errors", "prefetch_depth", "vram_slots", "pinned_slots", "layers"} <= set(data)
    assert data["engine"] == "offloadsim"
    check_engines_block(data, "offloadsim")


def test_llamacpp_plan_says_which_build_it_prices():
    """A llama.cpp plan with layers on the GPU says it is priced as a build with the CUDA flash-attention kernels
    (the preset's, llama.cpp's default) and how to price the other; a machine whose spec says the build lacks them
    is priced with their matrix-multiply attention (gpu_mm_attention_s per GPU attention on a one-token step), so
    the same placement takes longer by at least that per GPU decoder, and the note says so."""
    from hwmodels import get_machine
    from planner.engines import plan_for_engine
    from sim.model.families import shape_from_config
    from sim.model.resolve import preset_config
    from sim.plan import Budgets, Workload
    m = get_machine("h200-testbox")
    model = shape_from_config(preset_config("llama-3.1-8b"))
    w = Workload(batch=1, prompt_tokens=16, new_tokens=3)
    b = Budgets.of(m).model_copy(update={"vram_bytes": 8 * 2**30})
    fa = plan_for_engine("llamacpp", model, m, w, b)
    assert any("with its CUDA flash-attention kernels" in n and "flash_attention = false" in n for n in fa.notes)
    spec = costs_of(m, "llamacpp")
    assert spec.flash_attention and spec.gpu_mm_attention_s > 0
    no_fa = with_costs(m, "llamacpp", spec.model_copy(update={"flash_attention": False}))
    mm = plan_for_engine("llamacpp", model, no_fa, w, b)
    assert any("without its CUDA flash-attention kernels" in n and "flash_attention = true" in n for n in mm.notes)
    kinds = {u.name: u.kind for u in model.units}
    gpu_decoders = sum(p.compute == "gpu" and kinds[p.unit] == "decoder" for p in fa.plan.placements)
    assert gpu_decoders > 0
    assert mm.plan.placements == fa.plan.placements  # the planner's -ngl choice does not move by 10 us a layer here
    extra = mm.time_per_token_s - fa.time_per_token_s
    assert extra >= gpu_decoders * spec.gpu_mm_attention_s * (1 - 1e-6)
