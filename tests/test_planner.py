"""The planner: optimal on small instances (against brute force), never over budget, infeasible budgets explained,
never worse than a baseline, exports well formed."""
import itertools
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hwmodels import get_machine
from planner import plan, plan_with_report
from sim.engines.accelerate.export import to_accelerate
from sim.engines.llamacpp.export import to_llamacpp
from planner.evaluator import Evaluator
from planner.choices import OPTIONS
from planner.search import LOADER_SETTINGS
from sim.costs.memory import PlanError, check_plan, memory_use
from sim.model.resolve import load_model
from sim.plan import Budgets, Plan, Request, Workload
from sim.run.simulate import fast_simulate
from tests.conftest import TOY as SMALL_TOY
from tests.toys import toy_model

THREE = ("vram", "ram_pinned", "disk_raw")
TOY = SMALL_TOY.model_copy(update={"gpu": SMALL_TOY.gpu.model_copy(update={"vram_bytes": 10**6})})


def build(model, machine, assignment, settings, codec):
    ev = Evaluator(Request(model, machine, Workload(new_tokens=1), Budgets.unlimited()), codec)
    return ev.plan(np.array([OPTIONS.index(o) for o in assignment]), (*settings, None))


def brute_force(model, w, budgets):
    best = float("inf")
    for combo in itertools.product([(t, "gpu") for t in THREE], repeat=len(model.units)):
        for s in LOADER_SETTINGS:
            p = build(model, TOY, list(combo), s, None)
            try:
                check_plan(model, p, w, budgets)
            except PlanError:
                continue
            best = min(best, fast_simulate(model, TOY, p, w, budgets)["time_per_token_s"])
    return best


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 40), min_size=2, max_size=5), st.integers(0, 80), st.integers(40, 200),
       st.integers(1, 3))
def test_planner_matches_brute_force_optimum(sizes, vram, ram, tokens):
    model = toy_model(tuple(sizes))
    w = Workload(prompt_tokens=1, new_tokens=tokens + 1)
    budgets = Budgets(vram_bytes=max(sizes) * 2 + vram, ram_bytes=ram + 3 * max(sizes), pinned_bytes=ram // 2 + 2 * max(sizes))
    optimum = brute_force(model, w, budgets)
    got = plan(model, TOY, w, budgets, tiers=THREE, allow_cpu=False, time_budget_s=5.0)
    if optimum == float("inf"):
        assert not got.feasible
        return
    assert got.feasible
    assert fast_simulate(model, TOY, got, w, budgets)["time_per_token_s"] == pytest.approx(optimum, rel=1e-9)


@settings(max_examples=5, deadline=None)
@given(st.sampled_from(["qwen3-14b", "mixtral-8x7b"]), st.floats(1.5, 22), st.floats(8, 85), st.integers(1, 4))
def test_plan_never_exceeds_budgets(name, vram_gib, ram_gib, batch):
    model, machine = load_model(name), get_machine("desktop-4090")
    w = Workload(batch=batch, prompt_tokens=32, new_tokens=3)
    budgets = Budgets.of(machine, vram=int(vram_gib * 2**30), ram=int(ram_gib * 2**30))
    p = plan(model, machine, w, budgets, time_budget_s=0.3)
    if not p.feasible:
        assert "raise --" in p.reason
        return
    m = memory_use(model, p, w, budgets)
    assert m.vram_bytes <= budgets.vram_bytes
    assert m.pinned_bytes <= budgets.pinned_bytes
    assert m.ram_weights_bytes + m.pinned_bytes <= budgets.ram_bytes


@pytest.mark.parametrize("name, vram_gib, ram_gib", [("qwen3-14b", 4, 24), ("mixtral-8x7b", 6, 60),
                                                    ("qwen3-14b", 20, 8)])
def test_every_baseline_returns_a_plan_that_fits_or_raises(name, vram_gib, ram_gib):
    """baseline_plans relies on it: each baseline checks its plan against the budgets (check_plan or fit_slots)."""
    from planner.baselines import BASELINES
    model, machine = load_model(name), get_machine("desktop-4090")
    w = Workload(prompt_tokens=64, new_tokens=3)
    budgets = Budgets.of(machine, vram=vram_gib * 2**30, ram=ram_gib * 2**30)
    for fn in BASELINES.values():
        try:
            p = fn(model, machine, w, budgets)
        except PlanError:
            continue
        check_plan(model, p, w, budgets)


def test_infeasible_budget_is_explained():
    model, machine = load_model("qwen3-14b"), get_machine("rtx3080-laptop")
    p = plan(model, machine, Workload(), Budgets.of(machine, vram=2**20))  # not even the KV cache fits
    assert not p.feasible
    assert re.search(r"needs at least \d+\.\d\d GiB of VRAM .* staging slot for the largest unit 1\.45 GiB .* KV cache", p.reason)


@pytest.mark.parametrize("machine, vram_gib", [("rtx3080-laptop", 4), ("desktop-4090", 12), ("t4-cloud", 8)])
def test_planner_never_worse_than_best_baseline(machine, vram_gib):
    m, q = get_machine(machine), load_model("qwen3-14b")
    rep = plan_with_report(q, m, Workload(new_tokens=8), Budgets.of(m, vram=vram_gib * 2**30))
    best = min(v["time_per_token_s"] for v in rep.baselines.values() if "time_per_token_s" in v)
    assert rep.summary["time_per_token_s"] <= best * (1 + 1e-9)
    assert rep.summary["total_s"] >= rep.lower_bound_s * (1 - 1e-9)


def test_larger_vram_budget_never_slower():
    m, q = get_machine("rtx3080-laptop"), load_model("qwen3-14b")
    w = Workload(new_tokens=8)
    times = [plan_with_report(q, m, w, Budgets.of(m, vram=v * 2**30)).summary["time_per_token_s"] for v in (3, 5, 7)]
    assert times[0] >= times[1] * (1 - 1e-6) and times[1] >= times[2] * (1 - 1e-6)


def test_exports():
    m, q = get_machine("desktop-4090"), load_model("mixtral-8x7b")
    w = Workload(new_tokens=4)
    p = plan(q, m, w, Budgets.of(m, vram=16 * 2**30), time_budget_s=0.5)
    acc = to_accelerate(q, p, w, 16 * 2**30, 90 * 2**30)
    assert set(acc["device_map"].values()) <= {0, "cpu", "disk"}
    # every non-expert module, and each block's fused experts module once (transformers 5 has no per-expert modules)
    assert len(acc["device_map"]) == sum(len(u.modules) for u in q.units if u.kind != "expert") + q.n_blocks
    assert acc["max_memory"]["cpu"].endswith("GiB")
    llama = to_llamacpp(q, p)
    assert llama["args"][0] == "-ngl" and 0 <= int(llama["args"][1]) <= q.n_blocks + 1
    for rule in llama["ot"]:
        pattern, target = rule.rsplit("=", 1)
        re.compile(pattern)
        assert target == "CPU"


def _llama_plan(cpu_blocks, head_cpu):
    from sim.plan import Placement
    q = load_model("llama-3.1-8b")
    cpu = [u.kind == "lm_head" and head_cpu or u.block in cpu_blocks and u.kind != "lm_head" for u in q.units]
    return q, Plan(model=q.name, machine="m", placements=tuple(
        Placement(unit=u.name, tier="ram_pageable" if c else "vram", compute="cpu" if c else "gpu")
        for u, c in zip(q.units, cpu)))


def test_llamacpp_export_leaves_the_first_blocks_to_ngl():
    """llama.cpp's -ngl N puts the output and the last N-1 of 32 blocks on the GPU, with each CPU layer's KV cache in
    RAM; -ot on an offloaded layer keeps its KV cache and attention on the GPU (two crossings per token)."""
    q, p = _llama_plan({0, 1, 2}, head_cpu=False)
    ex = to_llamacpp(q, p)
    assert ex["args"] == ["-ngl", "30"] and ex["ot"] == [] and ex["notes"] == []  # 29 blocks + the output
    q, p = _llama_plan({0, 1, 2, 5, 9}, head_cpu=True)
    ex = to_llamacpp(q, p)
    assert ex["args"] == ["-ngl", "30", "-ot", "^blk\\.(5|9)\\.=CPU", "-ot", "^output(_norm)?\\.weight$=CPU"]
    assert any("twice per token" in n for n in ex["notes"])
    q, p = _llama_plan(set(range(32)), head_cpu=True)
    assert to_llamacpp(q, p)["args"] == ["-ngl", "0"]
    q, p = _llama_plan(set(range(32)), head_cpu=False)
    assert to_llamacpp(q, p)["args"] == ["-ngl", "1"]
    q, p = _llama_plan({4}, head_cpu=False)  # not a prefix: every block offloaded, block 4 sent back by -ot
    assert to_llamacpp(q, p)["args"] == ["-ngl", "33", "-ot", "^blk\\.(4)\\.=CPU"]


def _moe_plan(cpu_blocks, cpu_expert_blocks, model: str = "mixtral-8x7b"):
    from sim.plan import Placement
    q = load_model(model)  # mixtral-8x7b: 32 blocks of 8 experts
    cpu = [u.kind not in ("lm_head", "embedding") and (u.block in cpu_blocks or u.kind == "expert"
                                                      and u.block in cpu_expert_blocks) for u in q.units]
    return q, Plan(model=q.name, machine="m", placements=tuple(
        Placement(unit=u.name, tier="ram_pageable" if c else "vram", compute="cpu" if c else "gpu")
        for u, c in zip(q.units, cpu)))


def test_llamacpp_export_writes_the_next_blocks_experts_as_n_cpu_moe():
    """Blocks 0-1 on the CPU and the experts of blocks 2-4: -ngl 31 (30 blocks + the output) and --n-cpu-moe 5
    (the experts of blocks 0..4, the first two already on the CPU with their block); experts of blocks not right
    after them go by an anchored -ot rule instead; blocks without routed experts (DeepSeek's first, dense) do not
    break the run."""
    q, p = _moe_plan({0, 1}, {2, 3, 4})
    ex = to_llamacpp(q, p)
    assert ex["args"] == ["-ngl", "31", "--n-cpu-moe", "5"] and ex["ot"] == [] and ex["n_cpu_moe"] == 5
    q, p = _moe_plan(set(), {0, 1, 2})
    assert to_llamacpp(q, p)["args"] == ["-ngl", "33", "--n-cpu-moe", "3"]
    q, p = _moe_plan(set(), {3, 7})
    ex = to_llamacpp(q, p)
    assert ex["args"] == ["-ngl", "33", "-ot", "^blk\\.(3|7)\\.ffn_(up|down|gate|gate_up)_(ch|)exps\\.=CPU"] and ex["n_cpu_moe"] == 0
    # DeepSeek-R1's first three blocks are dense: the experts of blocks 3-9 on the CPU are --n-cpu-moe 10
    q, p = _moe_plan(set(), set(range(10)), "deepseek-r1")
    assert not any(u.kind == "expert" and u.block < 3 for u in q.units)
    assert to_llamacpp(q, p)["args"] == ["-ngl", str(q.n_blocks + 1), "--n-cpu-moe", "10"]


def test_llamacpp_export_runs_the_request_it_was_priced_for():
    """The command sets the context to the request's tokens (llama.cpp's default is the model's trained context),
    one slot per sequence sharing one KV cache, the threads, and turns off llama.cpp's own fitting of unset
    placement to free memory."""
    import shlex
    q, p = _llama_plan({0, 1}, head_cpu=False)
    ex = to_llamacpp(q, p, Workload(batch=1, prompt_tokens=100, new_tokens=28), threads=16)
    assert ex["runtime_args"] == ["-c", "128", "-t", "16", "-fit", "off"]
    words = shlex.split(ex["command"])
    assert words[0] == "llama-cli" and words[3:] == ["-ngl", "31", "-c", "128", "-t", "16", "-fit", "off"]
    ex = to_llamacpp(q, p, Workload(batch=4, prompt_tokens=100, new_tokens=28))  # 4 sequences of 128 tokens
    assert ex["runtime_args"] == ["-c", "512", "-np", "4", "-kvu", "-fit", "off"]  # one KV cache, as priced
    assert shlex.split(ex["command"])[0] == "llama-server" and ex["args"] == ["-ngl", "31"]


def test_llamacpp_export_is_anchored_quoted_and_refuses_opt():
    """llama.cpp matches -ot with regex_search; the head rule must not hit blk.N.attn_output.weight."""
    import shlex
    from hwmodels.units import InputError
    from sim.plan import Placement
    q = load_model("llama-3.1-8b")
    placements = tuple(Placement(unit=u.name, tier="ram_pageable" if u.kind == "lm_head" or u.block == 3 else "vram",
                                 compute="cpu" if u.kind == "lm_head" or u.block == 3 else "gpu") for u in q.units)
    p = Plan(model=q.name, machine="m", placements=placements)
    ex = to_llamacpp(q, p)
    pats = {rule.rsplit("=", 1)[0] for rule in ex["ot"]}
    head = next(x for x in pats if "output" in x)
    assert re.search(head, "output.weight") and not re.search(head, "blk.0.attn_output.weight")
    blk = next(x for x in pats if "blk" in x)
    assert re.search(blk, "blk.3.ffn_up.weight") and not re.search(blk, "blk.13.ffn_up.weight")
    assert shlex.split(ex["command"])[3:] == ex["args"] + ex["runtime_args"]  # pastes into a shell as the same arguments
    opt = load_model("opt-175b")
    with pytest.raises(InputError, match="llama.cpp cannot run"):
        to_llamacpp(opt, Plan(model=opt.name, machine="m",
                              placements=tuple(Placement(unit=u.name, tier="vram") for u in opt.units)))


def test_accelerate_export_maps_fused_experts_and_gives_python_with_int_gpu_key():
    from sim.plan import Placement
    q = load_model("mixtral-8x7b")
    placements = tuple(Placement(unit=u.name, tier="ram_pageable" if u.kind == "expert" and u.expert < 5 else "vram")
                       for u in q.units)
    acc = to_accelerate(q, Plan(model=q.name, machine="m", placements=placements), Workload(), 16 * 2**30, 90 * 2**30)
    experts = {k: v for k, v in acc["device_map"].items() if k.endswith(".experts")}
    assert len(experts) == q.n_blocks and set(experts.values()) == {"cpu"}   # 5 of 8 experts per block on the CPU
    assert not any(k.split(".")[-1].isdigit() and ".experts." in k for k in acc["device_map"])
    assert "max_memory={0: '" in acc["python"]


def test_a_request_is_one_frozen_value_the_planner_takes_whole():
    """plan_with_report(model, machine, workload, budgets, **keywords) is plan_request on their Request and the
    keywords' PlanOptions: the same plan, the same seeds scored; a Request cannot be changed, only replaced."""
    import dataclasses

    from planner.core import PlanOptions, plan_request
    model, w = toy_model((4, 8, 2)), Workload(prompt_tokens=2, new_tokens=3)
    b = Budgets(vram_bytes=30, ram_bytes=100, pinned_bytes=50)
    req = Request(model, TOY, w, b)
    a = plan_with_report(model, TOY, w, b, tiers=THREE, confirm=False)
    c = plan_request(req, PlanOptions(tiers=THREE, confirm=False))
    assert a.plan == c.plan and a.seeds == c.seeds and a.plan.feasible
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.budgets = Budgets.unlimited()
    assert req.replace(budgets=Budgets.unlimited()).budgets == Budgets.unlimited() and req.budgets == b
