"""Tests of the lab's campaign and report scripts (not run by CI: `python -m pytest lab/tests`)."""
from tests.test_peers import LLAMA6, MOE_CFG  # the test suite's shapes
import dataclasses
import json
import pytest
from planner.engines import plan_for_engine
from sim.engines.accelerate.planning import best_accelerate_map
from sim.model.families import shape_from_config
from sim.costs.memory import PlanError, memory_use
from sim.model.resolve import preset_config
from sim.plan import Budgets, Workload
from sim.engines.placements import POLICIES
from sim.engines.accelerate.placement import accelerate_map, accelerate_tiers
from sim.engines.llamacpp.layout import llamacpp_ngl
from sim.engines.hosted import MMAP_HIT_BYTES_PER_S
from sim.run.schedule import build_schedule
from sim.run.simulate import fast_simulate, simulate
from sim.model.shapes import ModelShape, UnitShape, ggml_ops
from tests.toys import BIG, FMT, toy_model
from validate.peer_calibration import PeerRun, fit, with_peer


def test_llamacpp_tools_gap_hand_worked():
    """The report's comparison of the two tools, no model in between: one sequence in llama-batched-bench over
    llama-bench's generation at the same file, shape, -ngl and step count. 0.023 / 0.020 - 1 = +15% and
    0.0102 / 0.010 - 1 = +2% over 12 steps (median 8.5%); a --no-op-offload run, a run of 4 sequences and one with no
    llama-bench twin (64 steps at -ngl 9) are left out."""
    from lab.reports.llamacpp_report import tools_gap

    def row(kind, ngl, test, t, batch=1, run="-ngl"):
        return {"file": "p", "arch": "a", "kind": kind, "ngl": ngl, "test": test, "measured_s": t, "batch": batch,
                "run": run}
    rows = [row("ngl", 14, "tg12", 0.020), row("batched", 14, "B1 tg12", 0.023),
            row("ngl", 29, "tg12", 0.010), row("batched", 29, "B1 tg12", 0.0102),
            row("batched", 29, "B1 tg12", 0.5, run="-ngl 29 -kvu --no-op-offload, 1 sequences"),
            row("batched", 29, "B4 tg12", 0.5, batch=4), row("batched", 9, "B1 tg64", 0.5)]
    gap = tools_gap(rows)
    assert list(gap) == ["one sequence, llama-batched-bench over llama-bench, tg12"]
    g = gap["one sequence, llama-batched-bench over llama-bench, tg12"]
    assert g["runs"] == 2
    assert g["median_pct"] == pytest.approx(8.5)
    assert (g["min_pct"], g["max_pct"]) == (pytest.approx(2.0), pytest.approx(15.0))


def test_llamacpp_benchmark_batch_extra_arguments():
    """--batch-extra takes arguments as a shell splits them and refuses, in one sentence naming the value, text that
    is not a list of options."""
    import argparse
    from lab.campaigns.h200_llamacpp import arg_list
    assert arg_list("-kvu --no-op-offload") == ["-kvu", "--no-op-offload"]
    assert arg_list("-fa 'on'") == ["-fa", "on"]
    for bad in ("kvu", "", "-kvu 'on"):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(bad).replace("'", ".")):
            arg_list(bad)


def test_llamacpp_report_spread_of_one_round_is_unmeasured():
    """A llama-batched-bench setting timed in one round has no measured spread (NaN, never among the steady runs);
    two rounds of 0.8 and 1.2 s over 4 steps (0.2 and 0.3 s a step) give the median 0.25 s and a spread of
    stdev(0.2, 0.3) / mean = 0.0707 / 0.25 = 28%."""
    import math
    from lab.reports.llamacpp_report import batched_runs
    from hwmodels.presets import load_machine
    from sim.model.resolve import load_model
    shape, machine = load_model("llama-3.1-8b"), load_machine("h200-testbox")
    rec = {"n_gpu_layers": 33, "pl": 4, "pp": 16, "tg": 4, "t_tg": 0.8, "args": ["-ngl", "33", "-kvu"]}
    [(_, one, run)] = batched_runs([rec], shape, machine)
    assert math.isnan(one["stddev_ns"]) and run.measured_tpot_s == pytest.approx(0.2)
    [(_, two, run)] = batched_runs([rec, dict(rec, t_tg=1.2)], shape, machine)
    assert run.measured_tpot_s == pytest.approx(0.25)
    assert two["stddev_ns"] / two["avg_ns"] == pytest.approx(0.2828, rel=1e-3)
    assert two["extra"] == "-kvu" and not two["kv_per_sequence"]


def test_llamacpp_report_reads_a_head_override():
    """llama-batched-bench's -ot rules as the report reads them: an anchored rule sending output.weight to CUDA0
    puts the head on the GPU (regex_search, as llama.cpp matches); a rule for the blocks, or the head to the CPU,
    does not."""
    from lab.reports.llamacpp_report import head_on_gpu, head_override
    from hwmodels.presets import load_machine
    assert head_override(["-ngl", "0", "-kvu", "-ot", r"^output\.weight=CUDA0"])
    assert not head_override(["-ngl", "0", "-ot", r"^output\.weight$=CPU"])
    assert not head_override(["-ngl", "0", "-ot", r"^blk\.0\.=CUDA0"])
    assert not head_override(["-ngl", "0", "-kvu"])
    m = load_machine("h200-testbox")
    w = Workload(batch=32, prompt_tokens=16, new_tokens=2)
    plan = head_on_gpu(llamacpp_ngl(LLAMA6, m, w, Budgets.of(m), 0), LLAMA6)
    t = plan.tiers()
    assert [(t[u.name].tier, t[u.name].compute) for u in LLAMA6.units if u.kind == "lm_head"] == [("vram", "gpu")]
    assert all(t[u.name].compute == "cpu" for u in LLAMA6.units if u.kind != "lm_head")


def test_llamacpp_report_host_copy_is_the_median_of_each_timing():
    """The report's host copy line: per file, the middle of each [min, median, max] RAM copy timing, in GB/s, before
    then after each architecture; an architecture without the timings adds nothing."""
    from lab.reports.llamacpp_report import host_copy
    loaded = [({"file": "t.json", "host_before": {"copy_bytes_per_s": [5e9, 18.5e9, 19e9]},
                "host_after": {"copy_bytes_per_s": [4e9, 14.04e9, 15e9]}},),
              ({"file": "t.json"},), ({"file": "u.json", "host_after": {"copy_bytes_per_s": [1e9, 2e9, 3e9]}},)]
    assert host_copy(loaded) == {"t.json": [18.5, 14.0], "u.json": [2.0]}


def test_llamacpp_report_tells_the_flash_attention_build():
    """A call's build had ggml-cuda's flash-attention kernels when configured with GGML_CUDA_FA=ON, or, resumed,
    when run from the folder --fa builds in; GGML_CUDA_FA=OFF, a plain resumed build and a record without the build
    are without them."""
    from lab.reports.llamacpp_report import flash_attention_build
    on = {"cmake_flags": ["-DGGML_CUDA=ON", "-DGGML_CUDA_FA=ON"], "binary": "/r/build-fa/bin/llama-bench"}
    assert flash_attention_build(on)
    assert flash_attention_build({"binary": "/var/tmp/x/build-fa/bin/llama-bench", "resumed": "already built"})
    assert not flash_attention_build({"cmake_flags": ["-DGGML_CUDA_FA=OFF"], "binary": "/r/build/bin/llama-bench"})
    assert not flash_attention_build({"binary": "/var/tmp/x/build/bin/llama-bench", "resumed": "already built"})
    assert not flash_attention_build({})


def test_moe_routing_refuses_what_is_not_an_moe_of_the_harness(monkeypatch, capsys):
    """lab/campaigns/moe_routing.py --arch must name an MoE of h200_matrix.ARCHS with a layer count: a dense
    architecture, an unknown one or a bad count ends in one sentence naming the flag and the choices."""
    import sys
    from lab.campaigns import moe_routing
    for bad in ("llama-8b:4", "nope:2", "qwen3-30b-a3b:x", "qwen3-30b-a3b:0"):
        monkeypatch.setattr(sys, "argv", ["moe_routing.py", "--arch", bad])
        with pytest.raises(SystemExit) as exc:
            moe_routing.main()
        message = str(exc.value)
        assert message.startswith(f"--arch: {bad!r} is not NAME:LAYERS of an MoE") and "moe-8x2" in message


def test_llamacpp_report_reads_n_cpu_moe_from_both_tools():
    """A llama-bench record's n_cpu_moe and a llama-batched-bench run's `-ncmoe N` argument both price the experts
    of the first N blocks on the CPU, and name the run by it."""
    from hwmodels.presets import load_machine
    from lab.reports.llamacpp_report import batched_runs, cpu_experts, run_of
    m = load_machine("h200-testbox")
    shape = shape_from_config(MOE_CFG)
    rec = {"n_prompt": 0, "n_gen": 8, "n_gpu_layers": 5, "n_cpu_moe": 1, "avg_ns": 8e6, "samples_ns": [8e6]}
    run = run_of(rec, shape, m, None, "-ngl 5 -ncmoe 1")
    t = run.plan.tiers()
    assert cpu_experts(run, shape) and t["model.layers.0.mlp.experts.7"].compute == "cpu"
    assert t["model.layers.1.mlp.experts.0"].compute == "gpu"
    bb = {"pl": 4, "pp": 16, "tg": 8, "t_tg": 0.08, "n_gpu_layers": 5, "args": ["-ngl", "5", "-kvu", "-ncmoe", "3"]}
    [(kind, rec_b, run_b)] = batched_runs([bb], shape, m)
    tb = run_b.plan.tiers()
    assert "-ncmoe 3" in run_b.label and rec_b["extra"] == "-kvu -ncmoe 3"
    assert tb["model.layers.2.mlp.experts.0"].compute == "cpu" and tb["model.layers.3.mlp.experts.0"].compute == "gpu"
    assert run_b.measured_tpot_s == pytest.approx(0.01)


def test_llamacpp_report_prices_a_run_without_mmap_pinned_and_names_its_variant():
    """llama-bench -lm none (no mapped file) prices the CPU weights pinned, the default and --no-host 1 (plain
    memory even without mmap) pageable; the run is named by its arguments besides the placement, and one with
    another thread count (-t) is kept apart as not priced as run."""
    from hwmodels.presets import load_machine
    from lab.reports.llamacpp_report import mapped_of, run_of, variant_of
    assert mapped_of(["-ngl", "3"]) and not mapped_of(["-ngl", "3", "-lm", "none"]) and not mapped_of(["--no-mmap"])
    assert not mapped_of(["--load-mode", "mlock"]) and not mapped_of(["-mmp", "0"]) and mapped_of(["-lm", "mmap+mlock"])
    assert mapped_of(["-ngl", "3", "-lm", "none", "--no-host", "1"]) and mapped_of(["-lm", "mmap"])
    assert mapped_of(["-lm", "none", "--no-host"])  # llama-cli's --no-host takes no value
    # llama-bench's record says what ran (a comma list such as -lm none,mmap runs both): it wins over the arguments
    assert not mapped_of(["-lm", "none,mmap"], {"load_mode": "none", "no_host": False})
    assert mapped_of(["-lm", "none,mmap"], {"load_mode": "mmap", "no_host": False})
    assert variant_of(["-ngl", "13", "-ncmoe", "3", "-lm", "none"]) == " -lm none" and variant_of(["-ngl", "2"]) == ""
    m = load_machine("h200-testbox")
    rec = {"n_prompt": 128, "n_gen": 0, "n_gpu_layers": 3, "avg_ns": 1e8, "samples_ns": [1e8], "stddev_ns": 0}
    tiers = {args: {p.tier for p in run_of(dict(rec, args=list(args)), LLAMA6, m, None, "x").plan.placements
                    if p.compute == "cpu"} for args in (("-ngl", "3"), ("-ngl", "3", "-lm", "none"))}
    assert tiers == {("-ngl", "3"): {"ram_pageable"}, ("-ngl", "3", "-lm", "none"): {"ram_pinned"}}
    from lab.reports.llamacpp_report import runs_of
    entry = {"llamacpp": [dict(rec, args=["-ngl", "3", *extra]) for extra in ([], ["-t", "8"], ["--poll", "100"])]
             + [dict(rec, args=["-ngl", "7", "-ncmoe", "2"], n_cpu_moe=2)], "exported": []}
    kinds = {run.label: kind for kind, _, run in runs_of(entry, LLAMA6, m)}
    # -t: not priced as run; -ncmoe on a dense model: nothing to move, skipped
    assert kinds == {"-ngl 3": "ngl", "-ngl 3 -t 8": "threads", "-ngl 3 --poll 100": "ngl"}


def test_llamacpp_harness_times_n_cpu_moe_on_moe_only_and_variants_where_weights_stay_on_the_cpu():
    """--ncmoe-shares adds -ncmoe settings for an MoE only (a dense model has no routed experts); --variant repeats
    each setting that keeps weights on the CPU (an -ngl below every layer and the head, or -ncmoe) with its
    arguments added. 4 blocks: shares 0 and 1.3 are -ngl 0 and 5 (everything), 0.5 of the blocks -ncmoe 2."""
    import argparse
    from lab.campaigns.h200_llamacpp import settings_of
    a = argparse.Namespace(ngl_every=0, ngl_shares="0,1.3", ngl="", ncmoe_shares=(0.5,), batches=(), threads="",
                           threads_at=0.5, ot=False, variant=[["-lm", "none"]])
    dense = [args for kind, args, plens, exp in settings_of(a, 4, [32], [])]
    assert dense == [["-ngl", "0"], ["-ngl", "5"], ["-ngl", "0", "-lm", "none"]]
    moe = [args for kind, args, plens, exp in settings_of(a, 4, [32], [], moe=True)]
    assert moe == [["-ngl", "0"], ["-ngl", "5"], ["-ngl", "5", "-ncmoe", "2"], ["-ngl", "0", "-lm", "none"],
                   ["-ngl", "5", "-ncmoe", "2", "-lm", "none"]]


def test_moe_gguf_tensors_stack_either_expert_layout():
    """transformers 5's fused experts (gate_up_proj [E, 2I, H], gate rows first; down_proj [E, H, I]) and
    transformers 4's one module per expert both become ffn_{gate,up,down}_exps of [experts, out, in], expert e at
    index e; other tensors pass through, the router as ffn_gate_inp."""
    torch = pytest.importorskip("torch")
    from lab.campaigns.h200_llamacpp import gguf_name, moe_tensors
    E, I, H = 3, 2, 4
    gate_up = torch.arange(E * 2 * I * H, dtype=torch.float32).reshape(E, 2 * I, H)
    down = torch.arange(E * H * I, dtype=torch.float32).reshape(E, H, I)
    fused = moe_tensors({"model.layers.0.mlp.experts.gate_up_proj": gate_up, "model.layers.0.mlp.experts.down_proj":
                         down, "model.layers.0.mlp.gate.weight": torch.zeros(E, H)})
    assert torch.equal(fused["model.layers.0.mlp.experts.gate_exps.weight"][1], gate_up[1, :I])
    assert torch.equal(fused["model.layers.0.mlp.experts.up_exps.weight"][2], gate_up[2, I:])
    assert torch.equal(fused["model.layers.0.mlp.experts.down_exps.weight"], down)
    per = {f"model.layers.1.mlp.experts.{e}.{p}_proj.weight": torch.full((I, H), 10.0 * e + j)
           for e in range(E) for j, p in enumerate(("gate", "up"))}
    stacked = moe_tensors(per)
    assert stacked["model.layers.1.mlp.experts.up_exps.weight"].shape == (E, I, H)
    assert stacked["model.layers.1.mlp.experts.up_exps.weight"][2, 0, 0] == 21.0
    assert gguf_name("model.layers.1.mlp.experts.up_exps.weight") == "blk.1.ffn_up_exps.weight"
    assert gguf_name("model.layers.0.mlp.gate.weight") == "blk.0.ffn_gate_inp.weight"


def test_llamacpp_export_pins_all_or_nothing_polls_between_gpu_blocks_and_the_harness_spells_it_for_llama_bench():
    """llama.cpp pins every CPU weight (--load-mode none) or none: a plan that pins only some exports none and says
    so. --poll 100 comes with CPU blocks after GPU ones, not with CPU blocks at the front or a CPU head alone. The
    harness times an export with llama-bench's spelling: -lm for --load-mode, -ot rules joined by ';'."""
    from hwmodels.presets import load_machine
    from lab.campaigns.h200_llamacpp import bench_args_of
    from sim.engines.llamacpp.export import to_llamacpp
    m = load_machine("h200-testbox")
    w = Workload(batch=1, prompt_tokens=64, new_tokens=4)
    b = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=2**36, pinned_bytes=2**36)
    pinned = llamacpp_ngl(LLAMA6, m, w, b, 3, mapped=False)
    exp = to_llamacpp(LLAMA6, pinned, w, 16)
    assert exp["args"] == ["-ngl", "3", "--load-mode", "none"] and "--poll" not in exp["runtime_args"]
    assert bench_args_of(exp) == ["-ngl", "3", "-lm", "none"]
    first = next(p for p in pinned.placements if p.compute == "cpu" and p.unit != "model.embed_tokens")
    part = pinned.model_copy(update={"placements": tuple(p.model_copy(update={"tier": "ram_pageable"})
                                                         if p is first else p for p in pinned.placements)})
    exp = to_llamacpp(LLAMA6, part, w)
    assert "--load-mode" not in exp["args"] and any("pins all of its CPU weights or none" in n for n in exp["notes"])
    head = next(u.name for u in LLAMA6.units if u.kind == "lm_head")
    blk5 = {u.name for u in LLAMA6.units if u.block == 5 and u.kind != "lm_head"}
    gpu = llamacpp_ngl(LLAMA6, m, w, b, LLAMA6.n_blocks + 1)

    def with_cpu(names):
        return gpu.model_copy(update={"placements": tuple(
            p.model_copy(update={"tier": "ram_pageable", "compute": "cpu"}) if p.unit in names else p
            for p in gpu.placements)})
    assert "--poll" not in to_llamacpp(LLAMA6, with_cpu({head}), w)["runtime_args"]  # the head alone, last
    exp = to_llamacpp(LLAMA6, with_cpu(blk5), w)  # the last block on the CPU, between GPU blocks and the head
    assert exp["runtime_args"][-2:] == ["--poll", "100"] and exp["ot"] == ["^blk\\.(5)\\.=CPU"]
    assert bench_args_of(exp) == ["-ngl", "7", "-ot", "^blk\\.(5)\\.=CPU", "--poll", "100"]


def test_llamacpp_report_reads_the_placement_llama_cpp_fit_chose_and_the_budget_it_fitted():
    """llama-fit-params' rules (blk\\.N\\.ffn_(up|down|gate)_(ch|)exps=CPU per block, given to llama-bench joined by
    ';') put those blocks' routed experts on the CPU; a partial layer's one expert tensor does not move its experts
    (two of three do); a dense model's ffn rule marks the run as a partial layer. The policy is priced at the budget
    llama.cpp fitted (its free memory less the margin), and told apart by the units the two compute differently."""
    from hwmodels.presets import load_machine
    from lab.reports.llamacpp_report import cpu_parts, fit_runs
    shape = shape_from_config(MOE_CFG)
    rules = "blk\\.2\\.ffn_(up|down|gate)_(ch|)exps=CPU;blk\\.3\\.ffn_(up|down|gate)_(ch|)exps=CPU;" \
            "blk\\.1\\.ffn_down.*=CPU"
    assert cpu_parts(shape, ["-ngl", "5", "-ot", rules]) == ({2, 3}, set())
    assert cpu_parts(shape, ["-ngl", "5", "-ot", "blk\\.0\\.ffn_(gate|gate_up|down).*=CPU"]) == ({0}, set())
    assert cpu_parts(shape, ["-ngl", "5", "-ot", "blk\\.0\\.ffn_up_exps=CUDA0"]) == (set(), set())
    assert cpu_parts(LLAMA6, ["-ot", "blk\\.4\\.ffn_(gate|up|gate_up|down).*=CPU"]) == (set(), {4})
    m = load_machine("h200-testbox")
    rec = {"n_prompt": 0, "n_gen": 8, "n_gpu_layers": 5, "avg_ns": 8e6, "samples_ns": [8e6], "stddev_ns": 0,
           "args": ["-ngl", "5", "-ot", rules]}
    entry = {"fits": [{"margin_mib": 1000, "fit_free_mib": 141000, "budget_bytes": 1, "bench": [rec]},
                      {"error": "llama-fit-params exited 1"}]}
    (kind, got, run), (pkind, pgot, prun) = fit_runs(entry, shape, m)
    assert (kind, pkind) == ("fit", "fit_policy") and got["fit_budget_bytes"] == 140000 * 2**20
    t = run.plan.tiers()
    assert all(t[f"model.layers.{b}.mlp.experts.{e}"].compute == ("cpu" if b >= 2 else "gpu")
               for b in range(4) for e in range(8))
    # 140,000 MiB holds the whole model: the policy keeps every expert on the GPU, 16 experts apart from --fit's
    assert pgot["policy_differs"] == 16 and not any(p.compute == "cpu" for p in prun.plan.placements
                                                    if shape.unit(p.unit).kind != "embedding")
    assert run.measured_tpot_s == prun.measured_tpot_s == pytest.approx(1e-3)
    # -ngl -1 (printed when everything fits): every layer and the output on the GPU
    every = dict(rec, n_gpu_layers=-1, args=["-ngl", "-1"])
    entry = {"fits": [{"margin_mib": 0, "budget_bytes": 2**30, "bench": [every]}]}
    (_, got, run), (_, pgot, _) = fit_runs(entry, shape, m)
    assert got["n_gpu_layers"] == 5 and pgot["fit_budget_bytes"] == 2**30 and pgot["policy_differs"] == 0


def test_repeat_floor_hand_worked(tmp_path):
    """The floor of timings 2 and 3 ms is 20% (2.4 ms misses both by 20%, nothing does better); a call's rounds are
    grouped by setting (the median repetition per token of each), and a miss is checked against its setting's
    other timings."""
    from lab.reports.repeat_floor import floor_pct, llamacpp_rounds, misses
    assert floor_pct([2.0, 3.0]) == pytest.approx(20.0)
    assert floor_pct([5.0, 5.0]) == 0.0
    p = 2 * 2.0 * 3.0 / (2.0 + 3.0)  # the prediction halfway in ratio: misses each by exactly the floor
    assert abs(p / 2.0 - 1) == pytest.approx(0.2) and abs(p / 3.0 - 1) == pytest.approx(0.2)
    rec = lambda ms, rnd: {"avg_ns": 0, "samples_ns": [ms * 32e6, ms * 32e6 * 9, ms * 32e6], "n_gen": 32,
                           "n_prompt": 0, "n_gpu_layers": 0, "args": ["-ngl", "0"], "round": rnd}
    call = {"archs": [{"arch": "x", "gguf_shape": {"n_blocks": 4}, "exported": [],
                       "llamacpp": [rec(2.0, 0), rec(3.0, 1), dict(rec(1.0, 0), n_gpu_layers=4, args=["-ngl", "4"])]},
                      {"arch": "x", "gguf_shape": {"n_blocks": 2}, "exported": [], "llamacpp": [rec(9.0, 0)]}]}
    (tmp_path / "c.json").write_text(json.dumps(call))
    # the slow middle repetition does not count; the same shape cut to 2 layers is another setting
    rounds = llamacpp_rounds([str(tmp_path / "c.json")])
    assert rounds == {("c.json", "x", 4, "-ngl 0", "tg32"): [pytest.approx(2e-3), pytest.approx(3e-3)]}
    rows = [{"file": "c.json", "arch": "x", "run": "-ngl 0", "test": "tg32", "pred": 2.1e-3, "error_pct": -30.0},
            {"file": "c.json", "arch": "x", "run": "-ngl 4", "test": "tg32", "pred": 1.5e-3, "error_pct": 50.0},
            {"file": "c.json", "arch": "x", "run": "-ngl 8", "test": "tg32", "pred": 1e-3, "error_pct": 5.0}]
    table = {0: [2e-3, 3e-3], 1: [1e-3], 2: [0.98e-3, 1.02e-3]}
    out = misses(rows, table, lambda r: int(r["run"].split()[1]) // 4, 25.0)
    # -ngl 0 missed by 30% but its other round (2 ms) is within 15% of 2.1 ms; -ngl 4 was timed once
    assert (out["missed_over_25_pct"], out["timed_again"], out["a_timing_within_15_pct_of_the_prediction"]) == (2, 1, 1)
    steady = out["runs of settings timed again that reproduced (floor <= 10%)"]
    assert steady["runs"] == 1 and steady["worst_abs_error_pct"] == 5.0  # -ngl 8: 0.98 and 1.02 ms, a 2% floor
