"""Peer engine models: their costs in the schedule, Accelerate's placement, the fit of their costs."""
import dataclasses
import json

import pytest

from sim.engines import costs_of
from sim.engines.accelerate.costs import AccelerateCosts
from sim.engines.airllm.costs import AirllmCosts
from sim.engines.llamacpp.costs import LlamacppCosts
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

W = Workload(batch=1, prompt_tokens=1, new_tokens=3)


def _accelerate(toy_machine, tiers, **costs):
    m = with_peer(toy_machine, "accelerate", AccelerateCosts(**{'mmap_reads': False, **costs}))
    model = toy_model((4, 8, 2))
    return model, m, accelerate_map(model, m, W, BIG, dict(zip(["l0", "l1", "l2"], tiers)), "accelerate")


def test_accelerate_costs_hand_worked(toy_machine):
    """Per token: l0 computes 4 B at 10 B/s (0.4 s) + the step cost 0.5; l1 (8 B, offloaded) is copied pageable at
    1 B/s after l0 ends (8 s), computes 0.8 s + 9 modules x 0.1 + 0.2 per loaded unit; l2 computes 0.2 s: 11.0 s."""
    model, m, plan = _accelerate(toy_machine, ["vram", "ram_pageable", "vram"], step_s=0.5, load_module_s=0.1,
                                 load_unit_s=0.2)
    assert [p.compute for p in plan.placements] == ["gpu"] * 3 and plan.engine == "accelerate"
    assert fast_simulate(model, m, plan, W, BIG)["time_per_token_s"] == pytest.approx(11.0)
    assert simulate(model, m, plan, W, BIG).summary["time_per_token_s"] == pytest.approx(11.0)
    ideal = plan.model_copy(update={"engine": "offloadsim"})  # the same map without Accelerate's costs: 9.4 s
    assert fast_simulate(model, m, ideal, W, BIG)["time_per_token_s"] == pytest.approx(9.4)


def test_accelerate_runs_on_the_cpu_when_nothing_is_on_the_gpu(toy_machine):
    """transformers with an all-'cpu' device_map computes on the CPU: no copies; its generate loop still costs the
    step cost once a token (0.5 s), on the first unit. llama.cpp's step cost is paid by tokens that use the GPU only."""
    model, m, plan = _accelerate(toy_machine, ["ram_pageable"] * 3, step_s=0.5)
    assert [p.compute for p in plan.placements] == ["cpu"] * 3
    sch = build_schedule(model, m, plan, W, BIG)
    assert sch.copy_s.sum() == 0
    assert sch.overhead_s[:3].tolist() == [0.5, 0.0, 0.0] and sch.overhead_s.sum() == 0.5 * W.new_tokens
    # CPU: 14 B at 5 B/s per token, and the loop
    assert fast_simulate(model, m, plan, W, BIG)["time_per_token_s"] == pytest.approx(14 / 5 + 0.5)
    ggml = with_peer(toy_machine, "llamacpp", LlamacppCosts(gpu_dispatch="eager", step_s=0.5))
    cpu_only = plan.model_copy(update={"engine": "llamacpp"})
    assert build_schedule(model, ggml, cpu_only, W, BIG).overhead_s.sum() == 0


def test_airllm_loader_and_mmap_reads(toy_machine):
    """AirLLM copies every load into a pinned block (memcpy 10 B/s: 0.4, 0.8, 0.2 s) and maps its files: a page-cache
    hit costs nothing of its own; its per-unit cleanup (1.5 s) lands on the compute lane. Cold (disk 1 B/s), the
    first step's pin copies fault the shards in (1.1 s a byte) and the hook waits (airllm_loader_wait_s; the toy's
    largest tensor is a third of a unit): l0, the first, its whole read (4 s); l1, the 5.33 B after its largest
    (5.87 s) less its 4 s copy, and the 2.67 B in flight (2.93 s) past the 1.5 s cleanup: 3.3 s; l2, 1.47 s less its
    1 s copy: 0.47 s (its 0.73 s in flight ends inside the cleanup). The reader lane pays none of it."""
    model = toy_model((4, 8, 2))
    m = with_peer(toy_machine, "airllm", AirllmCosts(pin_each_load=True, mmap_reads=True, load_unit_s=1.5))
    plan = POLICIES["airllm"](model, m, W, BIG)
    warm = build_schedule(model, m, plan, W.model_copy(update={"warm": True}), BIG)
    assert warm.unpack_s[:3].tolist() == pytest.approx([0.4, 0.8, 0.2])
    assert warm.overhead_s.tolist() == pytest.approx([1.5] * 9)
    sch = build_schedule(model, m, plan, W, BIG)
    assert sch.overhead_s.tolist() == pytest.approx([5.5, 4.8, 1.5 + 7 / 15] + [1.5] * 6)
    assert sch.loader_faults and sch.cold_bytes_per_s == 1.0
    assert sch.cache_bytes_per_s == MMAP_HIT_BYTES_PER_S
    ideal = POLICIES["airllm-ideal"](model, m, W, BIG)
    sch0 = build_schedule(model, m, ideal, W, BIG)
    assert ideal.engine == "offloadsim" and sch0.unpack_s.sum() == 0 and sch0.cache_bytes_per_s == 4.0


def test_airllm_keeps_a_tied_embedding_resident(toy_machine):
    """airllm 4.0 loads a tied embedding once onto the GPU and re-ties the head to it; only the decoder is streamed:
    its 8 B pinned by a memcpy (0.8 s), copied pinned at 2 B/s (4 s), and its cleanup paid (1.5 s); the final norm,
    which the head unit holds, is streamed too (1.5 s). The GPU holds the 4 B matrix once. Untied, every unit is
    streamed and the head unit is two of AirLLM's modules (norm, head: 3 s)."""
    units = (UnitShape(name="emb", kind="embedding", block=0, modules=("emb",), matrix_params=2, nbytes=4,
                       flop_params=0, hidden=0, launches=0),
             UnitShape(name="l0", kind="decoder", block=0, modules=("l0",), matrix_params=4, nbytes=8, flop_params=0,
                       hidden=0, launches=0),
             UnitShape(name="head", kind="lm_head", block=1, modules=("head",), matrix_params=0, nbytes=4,
                       tied_nbytes=4, flop_params=0, hidden=0, launches=0))
    model = ModelShape(name="tied", family="toy", weight_format=FMT, n_blocks=1, hidden=0, vocab=0, units=units)
    m = with_peer(toy_machine, "airllm", AirllmCosts(pin_each_load=True, mmap_reads=True, load_unit_s=1.5))
    plan = POLICIES["airllm"](model, m, W, BIG)
    assert [p.tier for p in plan.placements] == ["vram", "disk_raw", "vram"]
    warm = W.model_copy(update={"warm": True})  # page cache warm: the waits for a cold read are apart (test above)
    sch = build_schedule(model, m, plan, warm, BIG)
    assert sch.copy_s[:3].tolist() == pytest.approx([0, 4.0, 0])
    assert sch.unpack_s[:3].tolist() == pytest.approx([0, 0.8, 0])
    assert sch.overhead_s[:3].tolist() == pytest.approx([0, 1.5, 1.5])
    assert memory_use(model, plan, W, BIG).resident_vram_bytes == 4
    from offloadsim.commands_plan import _placement_summary  # what `plan` prints: the matrix once
    assert [(g["tier"], g["units"], g["nbytes"]) for g in _placement_summary(model, plan)] == [("vram", 2, 4),
                                                                                              ("disk_raw", 1, 8)]
    untied = model.model_copy(update={"units": units[:2] + (units[2].model_copy(update={"tied_nbytes": 0}),)})
    plan = POLICIES["airllm"](untied, m, W, BIG)
    assert all(p.tier == "disk_raw" for p in plan.placements)
    assert build_schedule(untied, m, plan, warm, BIG).overhead_s[:3].tolist() == pytest.approx([1.5, 1.5, 3.0])


LLAMA6 = shape_from_config(dict(preset_config("llama-3.1-8b"), num_hidden_layers=6))


@pytest.mark.parametrize("vram, ram, want", [
    # max_memory of the H200 runs (lab/data/peers/peers-b.json) and the map transformers 5.17 chose for them
    (2831219097, 100 * 2**30, {"model.embed_tokens": "vram", "model.layers.0": "vram", "model.layers.1": "ram_pageable",
                               "lm_head": "ram_pageable"}),
    (1415609548, 100 * 2**30, {"model.embed_tokens": "ram_pageable", "model.layers.0": "ram_pageable",
                               "lm_head": "ram_pageable"}),
    (1415609548, 943739699, {"model.embed_tokens": "disk_raw", "model.layers.5": "disk_raw", "lm_head": "disk_raw"}),
    # lab/data/peers/peers-d.json: the CPU keeps the largest block still to place (the 1.05 GB head) free as well, so
    # 2.36 GB of RAM holds the 1.05 GB embedding but not a 0.44 GB layer after it, and 3.54 GB three layers
    (1415609548, 2359349248, {"model.embed_tokens": "ram_pageable", "model.layers.0": "disk_raw", "lm_head": "disk_raw"}),
    (1415609548, 3539023872, {"model.embed_tokens": "ram_pageable", "model.layers.2": "ram_pageable",
                              "model.layers.3": "disk_raw", "lm_head": "disk_raw"}),
    (2831219097, 943739699, {"model.embed_tokens": "vram", "model.layers.0": "vram", "model.layers.1": "disk_raw",
                             "lm_head": "disk_raw"}),
])
def test_accelerate_placement_matches_measured_maps(vram, ram, want):
    tiers = accelerate_tiers(LLAMA6, Budgets(vram_bytes=vram, ram_bytes=ram, pinned_bytes=0))
    assert {k: tiers[k] for k in want} == want


# the layer of lab/data/peers/peers-q.json: 16 Llama layers of hidden 2048, 16 heads without grouping
FA16 = shape_from_config(dict(preset_config("llama-3.1-8b"), num_hidden_layers=16, hidden_size=2048,
                              intermediate_size=5632, num_attention_heads=16, num_key_value_heads=16, vocab_size=32000))
# that of lab/data/peers/peers-r.json: a Llama-3.2-1B-like layer whose head is tied to the embedding
TIED = shape_from_config(dict(preset_config("llama-3.1-8b"), num_hidden_layers=16, hidden_size=2048,
                              intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                              tie_word_embeddings=True))


def test_accelerate_placement_of_a_tied_head_and_of_the_heads_reserve():
    """Maps transformers 5.17 chose on the H200. R, 1.48 GB of GPU: the tied head goes with the 525 MB embedding,
    counted once, and only a 122 MB layer is reserved, so six layers fit (1483 - 122 - 525 = 836 MB over 6 x 122);
    reserving the head's 525 MB again would leave room for three. Q, 0.95 GB of RAM: the CPU reserve is the head's
    matrix (131.072 MB), not the head with the final norm (4 kB more); the eighth 102.8 MB layer fits by 2 kB."""
    t = accelerate_tiers(TIED, Budgets(vram_bytes=1482977280, ram_bytes=100 * 2**30, pinned_bytes=0))
    assert [t[f"model.layers.{i}"] for i in (5, 6)] == ["vram", "ram_pageable"]
    assert t["model.embed_tokens"] == t["lm_head"] == "vram"
    t = accelerate_tiers(TIED, Budgets(vram_bytes=741488640, ram_bytes=494325760, pinned_bytes=0))
    assert (t["model.embed_tokens"], t["lm_head"], t["model.layers.0"], t["model.layers.3"]) == \
        ("vram", "vram", "ram_pageable", "disk_raw")
    t = accelerate_tiers(FA16, Budgets(vram_bytes=571933900, ram_bytes=953223168, pinned_bytes=0))
    assert [t[f"model.layers.{i}"] for i in (2, 3, 10, 11)] == ["vram", "ram_pageable", "ram_pageable", "disk_raw"]


def test_fit_recovers_known_costs(toy_machine):
    """Runs 'measured' with step 0.5 s and 0.1 s per loaded module are explained by exactly those costs."""
    model = toy_model((4, 8, 2))
    truth = with_peer(toy_machine, "accelerate", AccelerateCosts(mmap_reads=False, step_s=0.5, load_module_s=0.1))
    runs = []
    for tiers in (["vram"] * 3, ["vram", "ram_pageable", "vram"], ["vram", "ram_pageable", "ram_pageable"]):
        plan = accelerate_map(model, truth, W, BIG, dict(zip(["l0", "l1", "l2"], tiers)), "accelerate")
        s = fast_simulate(model, truth, plan, W, BIG)
        runs.append((model, toy_machine, PeerRun("x", plan, W, BIG, s["time_per_token_s"], s["ttft_s"])))
    got = fit("accelerate", runs)
    assert got.step_s == pytest.approx(0.5, rel=1e-3) and got.load_module_s == pytest.approx(0.1, rel=1e-3)
    assert isinstance(got, AccelerateCosts)  # sources are the caller's, per value (machine.sources)


def test_planned_accelerate_map_never_slower_than_accelerates_own():
    model = LLAMA6
    from hwmodels.presets import load_machine
    m = load_machine("h200-testbox")
    w = Workload(batch=1, prompt_tokens=64, new_tokens=3)
    for frac in (0.35, 0.6, 0.9):
        b = Budgets.of(m, vram=int(frac * model.total_bytes))
        try:
            own = POLICIES["accelerate"](model, m, w, b)
        except PlanError:
            continue
        mine = best_accelerate_map(model, m, w, b)
        assert {p.tier for p in mine.placements} <= {"vram", "ram_pageable", "disk_raw"}
        assert fast_simulate(model, m, mine, w, b)["time_per_token_s"] <= \
            fast_simulate(model, m, own, w, b)["time_per_token_s"] * (1 + 1e-9)
        # offloadsim's planner can run any Accelerate map, so it is never slower than Accelerate
        ours = plan_for_engine("offloadsim", model, m, w, b)
        assert ours.time_per_token_s <= fast_simulate(model, m, mine.model_copy(update={"engine": "offloadsim"}), w, b)[
            "time_per_token_s"] * (1 + 1e-9)


def test_planned_accelerate_map_keeps_a_tied_head_with_its_embedding():
    """transformers shares one matrix between a tied head and the embedding, and Accelerate places them together:
    a planned map never splits them, at budgets from nothing but the embedding on the GPU to all of the model, and
    is never slower than Accelerate's own map."""
    from hwmodels.presets import load_machine
    from sim.engines.accelerate.export import to_accelerate
    m = load_machine("h200-testbox")
    w = Workload(batch=1, prompt_tokens=64, new_tokens=3)
    seen = set()
    for frac in (0.15, 0.3, 0.45, 0.6, 0.8, 1.1):
        for ram in (0.2, 10.0):
            b = Budgets(vram_bytes=int(frac * TIED.total_bytes), ram_bytes=int(ram * TIED.total_bytes),
                        pinned_bytes=0)
            try:
                mine = best_accelerate_map(TIED, m, w, b)
            except PlanError:
                continue
            t = mine.tiers()
            assert t["lm_head"].tier == t["model.embed_tokens"].tier
            seen.add(t["lm_head"].tier)
            dm = to_accelerate(TIED, mine, w, b.vram_bytes, b.ram_bytes)["device_map"]  # what --export writes
            assert dm["lm_head"] == dm["model.embed_tokens"] == dm["model.norm"]
            own = POLICIES["accelerate"](TIED, m, w, b)
            assert fast_simulate(TIED, m, mine, w, b)["time_per_token_s"] <= \
                fast_simulate(TIED, m, own, w, b)["time_per_token_s"] * (1 + 1e-9)
    assert "vram" in seen and len(seen) >= 2
    # the one matrix is counted once wherever the pair is kept: all of the model fits a GPU of its stored bytes,
    # and all of it in RAM takes those bytes of RAM
    b = Budgets(vram_bytes=TIED.total_bytes + 2**30, ram_bytes=0, pinned_bytes=0)
    assert {p.tier for p in best_accelerate_map(TIED, m, w, b).placements} == {"vram"}
    roomy = Budgets(vram_bytes=2**34, ram_bytes=2**36, pinned_bytes=0)
    on_ram = accelerate_map(TIED, m, w, roomy, {u.name: "ram_pageable" for u in TIED.units}, "x")
    assert memory_use(TIED, on_ram, w, roomy).ram_weights_bytes == TIED.total_bytes
    from offloadsim.commands_plan import _placement_summary  # what `plan` prints: the matrix once there too
    assert [(g["tier"], g["nbytes"]) for g in _placement_summary(TIED, on_ram)] == [("ram_pageable", TIED.total_bytes)]
    assert TIED.total_bytes == sum(u.nbytes for u in TIED.units) - TIED.units[-1].tied_nbytes


def test_llamacpp_ngl_extremes():
    from hwmodels.presets import load_machine
    m = load_machine("h200-testbox")
    b = Budgets.of(m)
    none = llamacpp_ngl(LLAMA6, m, W, b, 0)
    assert all(p.compute == "cpu" for p in none.placements)
    all_ = llamacpp_ngl(LLAMA6, m, W, b, LLAMA6.n_blocks + 1)
    on_gpu = [p.unit for p in all_.placements if p.tier == "vram"]
    assert on_gpu == [u.name for u in LLAMA6.units if u.kind != "embedding"]  # the embedding stays on the CPU
    # llama.cpp counts the output layer first (i_gpu_start = n_layer + 1 - ngl): -ngl 1 is the head alone, -ngl 3
    # the head and the last two blocks
    head = [u.name for u in LLAMA6.units if u.kind == "lm_head"]
    one = llamacpp_ngl(LLAMA6, m, W, b, 1)
    assert [p.unit for p in one.placements if p.tier == "vram"] == head
    three = llamacpp_ngl(LLAMA6, m, W, b, 3)
    decoders = [u.name for u in LLAMA6.units if u.kind == "decoder"]
    assert [p.unit for p in three.placements if p.tier == "vram"] == decoders[-2:] + head


def test_mapped_hits_cost_the_hosts_map_speed(toy_machine):
    """With a measured map speed (2 B/s), AirLLM's page-cache hits of its mapped files cost bytes / 2 B/s: a warm
    request of the toy model reads l0 (4 B) in 2 s, l1 (8 B) in 4 s, l2 (2 B) in 1 s; unmeasured, they are free."""
    model = toy_model((4, 8, 2))
    hm = toy_machine.host_memory.model_copy(update={"map_touch_bytes_per_s": 2.0})
    m = with_peer(toy_machine.model_copy(update={"host_memory": hm}), "airllm", AirllmCosts(pin_each_load=True, mmap_reads=True))
    w = W.model_copy(update={"warm": True})
    plan = POLICIES["airllm"](model, m, w, BIG)
    assert build_schedule(model, m, plan, w, BIG).cache_bytes_per_s == 2.0
    reads = [e for e in simulate(model, m, plan, w, BIG).events if e.stage == "read" and e.token == 1]
    assert [round(e.end_s - e.start_s, 9) for e in reads] == [2.0, 4.0, 1.0]


def test_accelerate_disk_offload_pays_per_tensor(toy_machine):
    """Everything offloaded to disk: Accelerate runs on the CPU and opens and maps each of a decoder's 9 tensors at
    every forward: 0.1 s each adds 3 units x 9 x 0.1 = 2.7 s per token on the compute lane; in RAM it pays none."""
    model, m, plan = _accelerate(toy_machine, ["disk_raw"] * 3, disk_tensor_s=0.1)
    assert [p.compute for p in plan.placements] == ["cpu"] * 3
    assert build_schedule(model, m, plan, W, BIG).overhead_s[:3].tolist() == pytest.approx([0.9] * 3)
    _, m0, plan0 = _accelerate(toy_machine, ["disk_raw"] * 3)
    assert fast_simulate(model, m, plan, W, BIG)["time_per_token_s"] \
        - fast_simulate(model, m0, plan0, W, BIG)["time_per_token_s"] == pytest.approx(2.7)
    model, m, plan = _accelerate(toy_machine, ["ram_pageable"] * 3, disk_tensor_s=0.1)
    assert build_schedule(model, m, plan, W, BIG).overhead_s.sum() == 0
    # each open also parses the file's header: 27 entries (one shard) x 0.01 s more per tensor, 9 tensors a unit
    model, m, plan = _accelerate(toy_machine, ["disk_raw"] * 3, disk_tensor_s=0.1, disk_header_entry_s=0.01)
    assert model.tensors_per_shard == 27
    assert build_schedule(model, m, plan, W, BIG).overhead_s[:3].tolist() == pytest.approx([9 * 0.37] * 3)


def test_accelerate_hooks_priced_on_disk_modules_computed_on_the_cpu(toy_machine):
    """Accelerate's hooks of a disk-offloaded CPU layer (hook_module_s 0.05 s) cost 9 modules x 0.05 = 0.45 s a unit
    beside its 9 opens x 0.1 s; layers in RAM computed on the CPU carry none (transformers attaches no hooks to an
    all-"cpu" map), and a layer loaded to the GPU pays load_module_s (0.02 s a module) instead."""
    model, m, plan = _accelerate(toy_machine, ["disk_raw"] * 3, disk_tensor_s=0.1, hook_module_s=0.05)
    assert build_schedule(model, m, plan, W, BIG).overhead_s[:3].tolist() == pytest.approx([0.9 + 0.45] * 3)
    model, m, plan = _accelerate(toy_machine, ["ram_pageable"] * 3, hook_module_s=0.05)
    assert build_schedule(model, m, plan, W, BIG).overhead_s.sum() == 0
    model, m, plan = _accelerate(toy_machine, ["vram", "disk_raw", "vram"], hook_module_s=0.05, load_module_s=0.02)
    assert [p.compute for p in plan.placements] == ["gpu"] * 3
    assert build_schedule(model, m, plan, W, BIG).overhead_s[:3].tolist() == pytest.approx([0.0, 9 * 0.02, 0.0])


def test_header_entries_per_five_gigabyte_shard():
    """12 GB in three 4 GB decoders of 9 tensors: ceil(12 / 5) = 3 shards of 9 entries each."""
    model = toy_model((4 * 10**9,) * 3)
    assert model.tensors_per_shard == 9


def test_a_mapped_embedding_on_the_cpu_reads_its_rows_only(toy_machine):
    """Accelerate's disk offload hands the CPU a view of the mapped file, so an embedding lookup touches the rows it
    reads (no bytes read ahead); offloadsim's engine reads the whole 6-byte unit from disk."""
    from sim.model.shapes import UnitShape
    base = toy_model((4, 8))
    emb = UnitShape(name="emb", kind="embedding", block=-1, modules=("emb",), matrix_params=3, nbytes=6,
                    flop_params=0, hidden=0, launches=0)
    model = base.model_copy(update={"units": (emb,) + base.units})
    m = with_peer(toy_machine, "accelerate", AccelerateCosts(mmap_reads=True))
    tiers = {"emb": "disk_raw", "l0": "disk_raw", "l1": "disk_raw"}
    plan = accelerate_map(model, m, W, BIG, tiers, "accelerate")
    assert build_schedule(model, m, plan, W, BIG).read_bytes[:3].tolist() == [0.0, 4.0, 8.0]
    own = plan.model_copy(update={"engine": "offloadsim"})
    assert build_schedule(model, m, own, W, BIG).read_bytes[:3].tolist() == [6.0, 4.0, 8.0]


def test_calibrate_measures_the_per_tensor_open(tmp_path):
    pytest.importorskip("torch")
    from sim.engines.accelerate.disk_cost import safetensors_tensor_s
    t = safetensors_tensor_s(tmp_path, tensors=8, nbytes=2**16)
    assert 0.0 <= t < 0.05 and not list(tmp_path.iterdir())  # seconds per tensor; the probe file is removed


def test_offload_open_line_resists_one_slow_pass(tmp_path):
    """The open's cost as a line in the header's entries, 1e-4 s + 1e-6 s an entry, from files of 16, 64 and 256
    tensors over three rounds: one pass of the 256-tensor file run 3x slow (the host stalled) leaves the line as it
    is, where a line through two files' single passes would have tripled its slope."""
    from sim.engines.accelerate.disk_cost import offload_open
    calls = []

    def timer(folder, n, passes):
        calls.append(n)
        return (1e-4 + 1e-6 * n) * (3.0 if len(calls) == 3 else 1.0)  # the first round's 256-tensor pass
    tensor_s, entry_s = offload_open(tmp_path, timer=timer)
    assert calls == [16, 64, 256] * 3
    assert tensor_s == pytest.approx(1e-4) and entry_s == pytest.approx(1e-6)
    flat = offload_open(tmp_path, timer=lambda folder, n, passes: 2e-4)  # no slope: the per-tensor cost alone
    assert flat == pytest.approx((2e-4, 0.0))


def test_calibrate_measures_the_map_speed(tmp_path):
    pytest.importorskip("torch")
    from validate.calibrate_host import map_touch
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(8 * 2**20))
    speed = map_touch(path, 8 * 2**20)
    assert 1e6 < speed < 1e15


def test_engine_candidates_ranked_by_the_objective():
    """Per token, or the request's total: first token 2 s + 4 decode steps of 0.5 s = 4 s."""
    from sim.engines.ranking import score as _score
    s, w = {"ttft_s": 2.0, "time_per_token_s": 0.5}, Workload(new_tokens=5)
    assert _score(s, w, "token") == 0.5 and _score(s, w, "total") == 4.0


def _llamacpp(toy_machine, tiers, **spec):
    from sim.engines.common import make_plan
    model = toy_model((4, 8, 2))
    m = with_peer(toy_machine, "llamacpp", LlamacppCosts(**{'gpu_dispatch': "eager", **spec}))
    names = ["l0", "l1", "l2"]
    plan = make_plan(model, m, "llamacpp", dict(zip(names, tiers)),
                     {n: "cpu" for n, t in zip(names, tiers) if t != "vram"}, prefetch_depth=0, overlap_copy=False,
                     vram_slots=1, pinned_slots=0, pinned_staging=False, engine="llamacpp")
    return model, m, plan


def _grids(model, times: dict[str, tuple[str, float]]) -> tuple:
    """Flat measured grids: unit -> (device, seconds at every point)."""
    from hwmodels.profiles import ComputeGrid
    from sim.costs.compute import signature
    return tuple(ComputeGrid(unit=signature(model.unit(n), "toy"), device=dev, dispatch="eager", batch=(1, 4),
                             prefill_tokens=(1, 8), prefill_s=((t, t), (t, t)), decode_context=(1, 8),
                             decode_s=((t, t), (t, t))) for n, (dev, t) in times.items())


def test_llamacpp_kernel_scales_hand_worked(toy_machine):
    """Measured grids: l0 on the CPU 0.8 s (x 0.5), l1 and l2 on the GPU 0.8 s and 0.2 s (x 2): 0.4 + 2.0 = 2.4 s per
    token; at scale 1 it is 1.8 s. On the roofline (no grid) the scales do not apply: a bound is not beaten."""
    model = toy_model((4, 8, 2))
    grids = _grids(model, {"l0": ("cpu", 0.8), "l1": ("gpu", 0.8), "l2": ("gpu", 0.2)})
    measured = toy_machine.model_copy(update={"compute_grids": grids})
    tiers = ["ram_pageable", "vram", "vram"]
    model, m, plan = _llamacpp(measured, tiers, cpu_compute_scale=0.5, gpu_compute_scale=2.0)
    assert fast_simulate(model, m, plan, W, BIG)["time_per_token_s"] == pytest.approx(2.4)
    assert simulate(model, m, plan, W, BIG).summary["time_per_token_s"] == pytest.approx(2.4)
    model, m, plan = _llamacpp(measured, tiers)
    assert fast_simulate(model, m, plan, W, BIG)["time_per_token_s"] == pytest.approx(1.8)
    model, m, plan = _llamacpp(toy_machine, tiers, cpu_compute_scale=0.5, gpu_compute_scale=2.0)
    assert fast_simulate(model, m, plan, W, BIG)["time_per_token_s"] == pytest.approx(1.8)


def test_llamacpp_cpu_rates_replace_the_grid(toy_machine):
    """With its own CPU streaming speed (2 B/s; the toy units have no FLOPs) llama.cpp's CPU layer l0 (4 bytes)
    takes 4 / 2 = 2 s, whatever the CPU grid (0.8 s x 0.5) says; l1 and l2 on the GPU grids 0.8 + 0.2 s: 3.0 s."""
    model = toy_model((4, 8, 2))
    grids = _grids(model, {"l0": ("cpu", 0.8), "l1": ("gpu", 0.8), "l2": ("gpu", 0.2)})
    measured = toy_machine.model_copy(update={"compute_grids": grids})
    model, m, plan = _llamacpp(measured, ["ram_pageable", "vram", "vram"], cpu_compute_scale=0.5,
                               cpu_bytes_per_s=2.0)
    assert fast_simulate(model, m, plan, W, BIG)["time_per_token_s"] == pytest.approx(3.0)
    assert simulate(model, m, plan, W, BIG).summary["time_per_token_s"] == pytest.approx(3.0)


def _llamacpp_of(model, toy_machine, tiers, spec):
    from sim.engines.common import make_plan
    m = with_peer(toy_machine, "llamacpp", spec)
    names = [u.name for u in model.units]
    return m, make_plan(model, m, "llamacpp", dict(zip(names, tiers)), {n: "cpu" for n, t in zip(names, tiers)
                        if t != "vram"}, prefetch_depth=0, overlap_copy=False, vram_slots=1, pinned_slots=0,
                        pinned_staging=False, engine="llamacpp")


def test_llamacpp_own_kernels_hand_worked_and_fit_recovers_them(toy_machine):
    """llama.cpp's decode: a CPU unit streams its bytes at cpu_bytes_per_s (2 B/s) plus cpu_op_s (0.01 s) per
    operator of its graph (a decoder: 19 with its attention fused, as a build with ggml-cuda's kernels runs every
    one), a GPU unit its bytes at the GPU's 10 B/s plus gpu_op_s (0.02 s) per operator (22: the fused kernel's
    savings are in gpu_op_s), and a GPU run pays step_s (0.3 s) per token (llama-bench's runs: their graphs warm).
    Units of 4, 8, 2 bytes (57 CPU operators, 66 GPU) and one of 16 bytes (19, 22): all-CPU tokens of
    14 / 2 + 0.57 = 7.57 s and 8 + 0.19 = 8.19 s,
    all-GPU tokens of 1.4 + 1.32 + 0.3 = 3.02 s and 1.6 + 0.44 + 0.3 = 2.34 s; a 16-token prefill (past
    MMV_MAX_TOKENS) takes the flat 0.5 s grid x 0.7 per unit + 0.3 = 1.35 s. The fit on those five runs gives the
    five values back."""
    truth = LlamacppCosts(gpu_dispatch="eager", step_s=0.3, cpu_bytes_per_s=2.0, cpu_op_s=0.01, gpu_op_s=0.02, gpu_compute_scale=0.7)
    runs, got_times = [], []
    prefill = Workload(batch=1, prompt_tokens=16, new_tokens=1)
    for sizes in ((4, 8, 2), (16,)):
        model = toy_model(sizes)
        machine = toy_machine.model_copy(update={"compute_grids": _grids(model, {u.name: ("gpu", 0.5)
                                                                             for u in model.units})})
        for tier, w in (("ram_pageable", W), ("vram", W), ("vram", prefill)):
            if sizes == (16,) and w is prefill:
                continue
            m, plan = _llamacpp_of(model, machine, [tier] * len(model.units), truth)
            s = fast_simulate(model, m, plan, w, BIG)
            gen = w is W
            got_times.append(s["time_per_token_s"] if gen else s["ttft_s"])
            runs.append((model, machine, PeerRun("x", plan, w, BIG, s["time_per_token_s"] if gen else float("nan"),
                                                 float("nan") if gen else s["ttft_s"], graphs_warm=True)))
    assert got_times == [pytest.approx(t) for t in (7.57, 3.02, 1.35, 8.19, 2.34)]
    got = fit("llamacpp", runs)
    for field in ("step_s", "cpu_bytes_per_s", "cpu_op_s", "gpu_op_s", "gpu_compute_scale"):
        assert getattr(got, field) == pytest.approx(getattr(truth, field), rel=1e-3), field


def test_llamacpp_cpu_share_in_the_last_level_cache_streams_faster(toy_machine):
    """A CPU share whose weights fit cpu_cache_share_alone (1.0, every unit on the CPU) or cpu_cache_share (0.6,
    the GPU taking part) of a 25-byte last-level cache streams at cpu_cache_bytes_per_s (7 B/s): units of 4, 8, 2
    bytes (14 bytes, 57 operators: decoders of 19, their attention fused) all on the CPU take 14 / 7 + 0.57 = 2.57 s
    a token; one of 26 bytes does not fit and takes 26 / 2 + 0.19 = 13.19 s. Without a known cache size the memory
    speed holds (7.57 s). 16 bytes fit the whole cache with every unit on the CPU, not its 0.6 (15 bytes) with a unit
    on the GPU. The fit gives the cache speed back (within 2%: it stops short on the GPU runs' two costs), and leaves
    it out when no run's CPU share fits."""
    from sim.engines.llamacpp.graphs import cpu_stream_bytes_per_s
    from validate.peer_calibration import identifiable
    truth = LlamacppCosts(gpu_dispatch="eager", step_s=0.3, cpu_bytes_per_s=2.0, cpu_cache_bytes_per_s=7.0, cpu_op_s=0.01, gpu_op_s=0.02,
                     gpu_compute_scale=0.7)
    cached = toy_machine.model_copy(update={"cpu": toy_machine.cpu.model_copy(update={"llc_bytes": 25})})
    runs, got_times = [], []
    for machine, sizes in ((cached, (4, 8, 2)), (cached, (26,)), (toy_machine, (4, 8, 2)), (cached, (4, 8, 2)),
                           (cached, (26,))):
        model = toy_model(sizes)
        tier = "ram_pageable" if len(runs) < 3 else "vram"
        m, plan = _llamacpp_of(model, machine, [tier] * len(model.units), truth)
        s = fast_simulate(model, m, plan, W, BIG)
        got_times.append(s["time_per_token_s"])
        runs.append((model, machine, PeerRun("x", plan, W, BIG, s["time_per_token_s"], float("nan"))))
    assert got_times[:3] == [pytest.approx(t) for t in (2.57, 13.19, 7.57)]
    model, machine, run = runs[0]
    assert cpu_stream_bytes_per_s(model, run.plan, machine, truth) == 7.0
    for tiers, speed in ((["ram_pageable"] * 2, 7.0), (["ram_pageable", "vram"], 2.0)):  # 16 of 25 bytes: 0.64
        m, plan = _llamacpp_of(toy_model((16, 2)), cached, tiers, truth)
        assert cpu_stream_bytes_per_s(toy_model((16, 2)), plan, m, truth) == speed, tiers
    assert cpu_stream_bytes_per_s(model, run.plan, machine, truth.model_copy(update={"cpu_bytes_per_s": None})) is None
    got = fit("llamacpp", runs)
    for field in ("cpu_bytes_per_s", "cpu_cache_bytes_per_s", "cpu_op_s"):  # six parameters through the simulator
        assert getattr(got, field) == pytest.approx(getattr(truth, field), rel=2e-2), field
    params = ("cpu_bytes_per_s", "cpu_cache_bytes_per_s")
    assert identifiable(params, runs[1:], LlamacppCosts(gpu_dispatch="eager")) == ("cpu_bytes_per_s",)  # no CPU share fits: no cache speed
    assert identifiable(params, runs[:1], LlamacppCosts(gpu_dispatch="eager")) == params


def test_llamacpp_offloads_large_steps_per_operation():
    """A 128-token prompt with every layer on the CPU: llama.cpp copies the blocks' weights to the GPU for the
    prefill, but looks the embedding up in place and computes the head for the last position only (batch 1 < 32);
    at batch 32 the head is offloaded too, and so is every decode step (32 tokens); at batch 1 decode copies nothing."""
    from hwmodels.presets import load_machine
    m = load_machine("h200-testbox")
    for batch, head_copied in ((1, False), (32, True)):
        w = Workload(batch=batch, prompt_tokens=128, new_tokens=2)
        plan = llamacpp_ngl(LLAMA6, m, w, Budgets.of(m), 0)
        sch = build_schedule(LLAMA6, m, plan, w, Budgets.of(m))
        kinds = [LLAMA6.units[int(u)].kind for u in sch.unit]
        first = {k: float(c) for k, c, s in zip(kinds, sch.copy_s, sch.step) if s == 0}
        assert first["embedding"] == 0 and first["decoder"] > 0 and (first["lm_head"] > 0) == head_copied
        assert all((c == 0) == (batch == 1) for c, s, k in zip(sch.copy_s, sch.step, kinds) if s == 1 and k == "decoder")


def _shaped(units: list[tuple[str, str, int, int]], hidden: int = 2):
    """A model of (name, kind, bytes, multiplied parameters) units of this hidden size (rows = parameters / hidden)."""
    from sim.model.shapes import ModelShape, UnitShape
    from tests.toys import FMT
    us = tuple(UnitShape(name=n, kind=k, block=i, modules=(n,), matrix_params=nb // 2, nbytes=nb, flop_params=fp,
                         hidden=hidden, launches=0) for i, (n, k, nb, fp) in enumerate(units))
    return ModelShape(name="shaped", family="toy", weight_format=FMT, n_blocks=len(units), hidden=hidden, vocab=0,
                      units=us)


def test_llamacpp_gpu_decode_pays_per_weight_row_and_fit_recovers_it(toy_machine):
    """A GPU unit at decode: its bytes (weights + 4 x hidden 2 of activations) at 10 B/s + 22 operators x gpu_op_s
    (0.02 s) + its rows (multiplied parameters / hidden) x gpu_row_s (0.1 s), and the run pays step_s (0.3 s). Units
    of 4 and 8 bytes with 8 and 6 parameters (4 + 3 rows): (12 + 16) / 10 + 0.88 + 0.7 + 0.3 = 4.68 s a token;
    without the row cost 3.98 s, on the same machine objects
    (the schedule's compute cache must not hand back the other cost's times). The fit on three all-GPU runs whose
    operators and rows vary apart, and the CPU runs, gives the row cost back."""
    from sim.costs.compute import matrix_rows
    truth = LlamacppCosts(gpu_dispatch="eager", step_s=0.3, cpu_bytes_per_s=2.0, cpu_op_s=0.01, gpu_op_s=0.02, gpu_row_s=0.1)
    a = _shaped([("l0", "decoder", 4, 8), ("l1", "decoder", 8, 6)])
    assert [matrix_rows(u) for u in a.units] == [4, 3]
    m, plan = _llamacpp_of(a, toy_machine, ["vram", "vram"], truth)
    assert fast_simulate(a, m, plan, W, BIG)["time_per_token_s"] == pytest.approx(4.68)
    m0 = with_peer(toy_machine, "llamacpp", truth.model_copy(update={"gpu_row_s": 0.0}))
    assert fast_simulate(a, m0, plan, W, BIG)["time_per_token_s"] == pytest.approx(3.98)
    assert simulate(a, m, plan, W, BIG).summary["time_per_token_s"] == pytest.approx(4.68)
    b = _shaped([("l0", "decoder", 16, 4)])  # 22 operators, 2 rows
    c = _shaped([("l0", "decoder", 6, 48), ("l1", "decoder", 6, 48)])  # 44 operators, 48 rows
    runs = []
    for model in (a, b, c):
        for tier in ("vram", "ram_pageable"):
            m, plan = _llamacpp_of(model, toy_machine, [tier] * len(model.units), truth)
            t = fast_simulate(model, m, plan, W, BIG)["time_per_token_s"]
            # graphs warm (llama-bench's repetitions): else the warm-up's cost per operator and gpu_op_s count the
            # same operators in these runs and the fit could take either
            runs.append((model, toy_machine, PeerRun("x", plan, W, BIG, t, float("nan"), graphs_warm=True)))
    got = fit("llamacpp", runs)
    for field in ("step_s", "gpu_op_s", "gpu_row_s", "cpu_bytes_per_s", "cpu_op_s"):
        assert getattr(got, field) == pytest.approx(getattr(truth, field), rel=1e-3), field


def test_llamacpp_head_after_cpu_layers_streams_at_its_own_speed(toy_machine):
    """llama.cpp's head on the CPU right after CPU layers streams at cpu_head_bytes_per_s (3 B/s), after GPU layers at
    cpu_bytes_per_s (2 B/s). All on the CPU (layers of 4 and 8 bytes, a 6-byte head; 19 + 19 + 3 operators at 0.01
    s, the attentions fused): 4 / 2 + 8 / 2 + 6 / 3 + 0.41 = 8.41 s a token. The layers on the GPU (12 / 10 + 44 x
    0.02 + step 0.3 = 2.38 s) and the head on the CPU at 2 B/s (3 + 0.03 s): 5.41 s. The fit keeps the head's speed
    only when a run measures it, and otherwise leaves it absent even where the profile had one."""
    from sim.engines.llamacpp.graphs import cpu_stream_bytes_per_s
    from validate.peer_calibration import identifiable
    truth = LlamacppCosts(gpu_dispatch="eager", step_s=0.3, cpu_bytes_per_s=2.0, cpu_head_bytes_per_s=3.0, cpu_op_s=0.01, gpu_op_s=0.02)
    model = _shaped([("l0", "decoder", 4, 0), ("l1", "decoder", 8, 0), ("head", "lm_head", 6, 0)], hidden=0)
    times, plans = [], []
    for tiers in (["ram_pageable"] * 3, ["vram", "vram", "ram_pageable"]):
        m, plan = _llamacpp_of(model, toy_machine, tiers, truth)
        times.append(fast_simulate(model, m, plan, W, BIG)["time_per_token_s"])
        plans.append(plan)
    assert times == [pytest.approx(8.41), pytest.approx(5.41)]
    assert [cpu_stream_bytes_per_s(model, p, toy_machine, truth, "lm_head") for p in plans] == [3.0, 2.0]
    assert cpu_stream_bytes_per_s(model, plans[0], toy_machine, truth, "decoder") == 2.0
    params = ("cpu_bytes_per_s", "cpu_head_bytes_per_s")
    runs = [(model, toy_machine, PeerRun("x", p, W, BIG, t, float("nan"))) for p, t in zip(plans, times)]
    assert identifiable(params, runs, LlamacppCosts(gpu_dispatch="eager")) == params
    assert identifiable(params, runs[1:], LlamacppCosts(gpu_dispatch="eager")) == ("cpu_bytes_per_s",)  # no head after CPU layers
    stale = with_peer(toy_machine, "llamacpp", truth)  # a profile that already has a head speed
    got = fit("llamacpp", [(model, stale, run) for _, _, run in runs[1:]])
    assert got.cpu_head_bytes_per_s is None  # no run measured it: absent, not the profile's stale value


def test_llamacpp_several_sequences_hand_worked(toy_machine):
    """A decode step of B sequences (lab/data/peers/llamacpp-m.json): on the GPU, a unit of 4 bytes, 8 multiplied parameters, hidden 2 (4
    rows) streams its weights once and 4 x hidden x B bytes of activations at 10 B/s, pays 22 operators x 0.02 s and
    per row gpu_multi_row_s (0.1) + B x gpu_row_token_s (0.05): at B = 4, 36 / 10 + 0.44 + 4 x 0.3 = 5.24 s; one
    sequence pays gpu_row_s (0.07) a row: 1.2 + 0.44 + 0.28 = 1.92 s; 40 sequences likewise (llamacpp-p.json: linear past
    32), 324 B / 10 + 0.44 + 4 x (0.1 + 40 x 0.05) = 41.24 s, where a prefill of 40 tokens takes the roofline (no
    grid): 324 B / 10 = 32.4 s. Without the per-token cost, 2-8 tokens pay gpu_row_s (3.6 + 0.44 + 0.28) and 16
    the roofline (13.2 s). On the CPU at B = 4 the streaming (36 B / 2 B/s = 18 s) and the multiplying (2 x 8 x 4
    FLOP / 8 FLOP/s = 8 s) overlap in part: (18^3 + 8^3)^(1/3) + 22 x 0.01; without the engine's own rate, the
    larger of 18 s and the CPU's 64 / 1e6 s."""
    from sim.costs.compute import OVERLAP_NORM, CpuKernels, GpuKernels, cpu_compute_s, gpu_compute_s
    assert OVERLAP_NORM == 3
    u = _shaped([("l0", "decoder", 4, 8)]).units[0]
    multi, one = GpuKernels(op_s=0.02, row_s=0.07, multi_row_s=(0.1, 0.05)), GpuKernels(op_s=0.02, row_s=0.07)
    assert gpu_compute_s(u, toy_machine, 4, 1, 0, "toy", multi) == pytest.approx(5.24)
    assert gpu_compute_s(u, toy_machine, 1, 1, 0, "toy", multi) == pytest.approx(1.92)
    assert gpu_compute_s(u, toy_machine, 40, 1, 0, "toy", multi) == pytest.approx(41.24, rel=1e-4)
    assert gpu_compute_s(u, toy_machine, 1, 40, 0, "toy", multi) == pytest.approx(32.4, rel=1e-4)
    assert gpu_compute_s(u, toy_machine, 4, 1, 0, "toy", one) == pytest.approx(4.32)
    assert gpu_compute_s(u, toy_machine, 16, 1, 0, "toy", one) == pytest.approx(13.2, rel=1e-4)
    overlap, stream = CpuKernels(stream_bytes_per_s=2.0, op_s=0.01, flops_per_s=8.0), CpuKernels(stream_bytes_per_s=2.0, op_s=0.01)
    assert cpu_compute_s(u, toy_machine, 4, 1, 0, "toy", kernels=overlap) == \
        pytest.approx((18 ** 3 + 8 ** 3) ** (1 / 3) + 0.22)
    assert cpu_compute_s(u, toy_machine, 4, 1, 0, "toy", kernels=stream) == pytest.approx(18.22)


def test_llamacpp_cpu_row_cost_hand_worked_and_fit_recovers_it(toy_machine):
    """A CPU decoder streams its bytes at cpu_bytes_per_s (2 B/s), pays 19 operators (its attention fused) x cpu_op_s
    (0.01 s) and its rows (multiplied parameters / hidden 2) x cpu_row_s (0.05 s): 4 bytes of weights and 4 x hidden
    of activations, 8 parameters (4 rows), take 12 / 2 + 0.19 + 0.2 = 6.39 s; the embedding's rows are looked up
    (a row of 2 x 2 bytes, 8 of activations, one operator: 6.01 s), never a row cost. The fit on all-CPU runs of
    models whose bytes, operators and rows vary apart gives the row cost back beside the others, the fit counts the
    rows of the CPU's units, and a host twice as fast halves it."""
    from sim.costs.compute import CpuKernels, cpu_compute_s
    from sim.engines.llamacpp.fitting import host_scaled
    from validate.peer_calibration import features
    u = _shaped([("l0", "decoder", 4, 8)]).units[0]
    fused = CpuKernels(stream_bytes_per_s=2.0, op_s=0.01, flash_attention=True, row_s=0.05)
    assert cpu_compute_s(u, toy_machine, 1, 1, 0, "toy", kernels=fused) == pytest.approx(6.39)
    e = _shaped([("emb", "embedding", 4, 8)]).units[0]
    unfused = CpuKernels(stream_bytes_per_s=2.0, op_s=0.01, row_s=0.05)
    assert cpu_compute_s(e, toy_machine, 1, 1, 0, "toy", kernels=unfused) == pytest.approx(6.01)
    truth = LlamacppCosts(gpu_dispatch="eager", step_s=0.3, cpu_bytes_per_s=2.0, cpu_op_s=0.01, cpu_row_s=0.05, gpu_op_s=0.02)
    runs = []
    for model in (_shaped([("l0", "decoder", 4, 8), ("l1", "decoder", 8, 6)]), _shaped([("l0", "decoder", 16, 4)]),
                  _shaped([("l0", "decoder", 6, 48), ("l1", "decoder", 6, 48)]), _shaped([("l0", "decoder", 2, 2)])):
        for tier in ("vram", "ram_pageable"):
            m, plan = _llamacpp_of(model, toy_machine, [tier] * len(model.units), truth)
            t = fast_simulate(model, m, plan, W, BIG)["time_per_token_s"]
            runs.append((model, toy_machine, PeerRun("x", plan, W, BIG, t, float("nan"))))
    assert features(runs[1][0], runs[1][2], ("cpu_row_s",)).tolist() == [7.0]  # 4 + 3 rows on the CPU
    assert features(runs[0][0], runs[0][2], ("cpu_row_s",)).tolist() == [0.0]  # on the GPU
    got = fit("llamacpp", runs)
    for field in ("cpu_bytes_per_s", "cpu_op_s", "cpu_row_s"):
        assert getattr(got, field) == pytest.approx(getattr(truth, field), rel=2e-2), field
    assert host_scaled(truth, 2.0).cpu_row_s == pytest.approx(0.025)


def test_llamacpp_fit_recovers_the_costs_of_several_sequences(toy_machine):
    """Runs of one and of 2 and 4 sequences, all on the GPU and all on the CPU, made with known costs: the fit gives
    back the per-row costs of a several-token step and the CPU's multiply rate beside the single-sequence costs;
    with single-sequence runs only it leaves them absent (their defaults), as nothing measured them."""
    truth = LlamacppCosts(gpu_dispatch="eager", step_s=0.3, cpu_bytes_per_s=2.0, cpu_op_s=0.01, cpu_flops_per_s=8.0, gpu_op_s=0.02,
                     gpu_row_s=0.1, gpu_multi_row_s=0.2, gpu_row_token_s=0.05)
    models = [_shaped([("l0", "decoder", 4, 8), ("l1", "decoder", 8, 6)]), _shaped([("l0", "decoder", 16, 4)]),
              _shaped([("l0", "decoder", 6, 48), ("l1", "decoder", 6, 48)])]
    runs = []
    for model in models:
        for tier in ("vram", "ram_pageable"):
            for batch in (1, 2, 4):
                w = Workload(batch=batch, prompt_tokens=1, new_tokens=3)
                m, plan = _llamacpp_of(model, toy_machine, [tier] * len(model.units), truth)
                t = fast_simulate(model, m, plan, w, BIG)["time_per_token_s"]
                # graphs warm (llama-bench's repetitions): a warm-up's cost per GPU operator would otherwise
                # be one with gpu_op_s on these equally long runs
                runs.append((model, toy_machine, PeerRun("x", plan, w, BIG, t, float("nan"), graphs_warm=True)))
    got = fit("llamacpp", runs)
    for field in ("step_s", "gpu_op_s", "gpu_row_s", "gpu_multi_row_s", "gpu_row_token_s", "cpu_bytes_per_s",
                  "cpu_op_s", "cpu_flops_per_s"):
        assert getattr(got, field) == pytest.approx(getattr(truth, field), rel=1e-3), field
    single = fit("llamacpp", [r for r in runs if r[2].workload.batch == 1])
    assert single.gpu_row_token_s is None and single.cpu_flops_per_s is None and single.gpu_multi_row_s == 0.0








def test_ggml_weights_and_attention_cells_hand_worked():
    """A GGUF holds 9 weights per Llama decoder (norm, q, k, v, o, norm, gate, up, down), 11 per Qwen3 decoder (its
    q and k norms), 2 per head (norm, output). ggml's attention runs every new token against every used cell of the
    shared cache rounded up to 256: 32 sequences at context 16 decoding one token use 32 x 17 = 544 cells -> 768, so
    10 FLOPs per query and cell give 10 x 32 x 768 = 245760; one 512-token prompt 10 x 512 x 512."""
    from sim.model.shapes import UnitShape, ggml_weights
    assert (ggml_weights("decoder", "llama"), ggml_weights("decoder", "qwen3"), ggml_weights("lm_head", "qwen3")) \
        == (9, 11, 2)
    u = UnitShape(name="l0", kind="decoder", block=0, modules=("l0",), matrix_params=1, nbytes=2, flop_params=1,
                  hidden=2, launches=0, attn_flops_per_ctx_token=10)
    assert u.ggml_attention_flops(32, 1, 16) == 10 * 32 * 768
    assert u.ggml_attention_flops(1, 512, 0) == 10 * 512 * 512
    assert u.ggml_attention_flops(1, 1, 0) == 10 * 256


def test_llamacpp_offloaded_unit_pays_its_splits_and_cpu_attention():
    """At -ngl 0 and 32 sequences ggml multiplies every CPU-held weight on the GPU, one split each: a Llama decoder
    pays 9 x gpu_offload_split_s more, the head 2 x, the embedding (looked up in place) nothing; its attention stays
    on the CPU: doubling the CPU's multiply rate halves that part (ggml_attention_flops / cpu_flops_per_s). At one
    sequence nothing is offloaded and the split cost changes nothing. The fit's count per token agrees: 6 x 9 + 2."""
    from hwmodels.presets import load_machine
    from validate.peer_calibration import features
    m = load_machine("h200-testbox")
    spec = costs_of(m, "llamacpp")

    def compute(batch: int, **update) -> dict[str, float]:
        mm = with_peer(m, "llamacpp", spec.model_copy(update=update))
        w = Workload(batch=batch, prompt_tokens=16, new_tokens=2)
        plan = llamacpp_ngl(LLAMA6, mm, w, Budgets.of(mm), 0)
        sch = build_schedule(LLAMA6, mm, plan, w, Budgets.of(mm))
        return {LLAMA6.units[int(u)].kind: float(c) for u, c, s in zip(sch.unit, sch.compute_s, sch.step) if s == 1}
    base, split = compute(32, gpu_offload_split_s=0.0), compute(32, gpu_offload_split_s=1e-3)
    assert split["decoder"] - base["decoder"] == pytest.approx(9e-3)
    assert split["lm_head"] - base["lm_head"] == pytest.approx(2e-3)
    assert split["embedding"] == base["embedding"]
    fast = compute(32, gpu_offload_split_s=0.0, cpu_flops_per_s=2 * spec.cpu_flops_per_s)
    dec = next(u for u in LLAMA6.units if u.kind == "decoder")
    attention = dec.ggml_attention_flops(32, 1, 16) / spec.cpu_flops_per_s
    assert base["decoder"] - fast["decoder"] == pytest.approx(attention / 2)
    assert compute(1, gpu_offload_split_s=0.0) == compute(1, gpu_offload_split_s=1e-3)
    w = Workload(batch=32, prompt_tokens=16, new_tokens=2)
    run = PeerRun("b32", llamacpp_ngl(LLAMA6, m, w, Budgets.of(m), 0), w, Budgets.of(m), 1.0, float("nan"))
    assert features(LLAMA6, run, ("gpu_offload_split_s",)).tolist() == [6 * 9 + 2]
    # the fit's linear start: an offloaded step streams nothing at the CPU's speeds (its weights are copied)
    from validate.peer_calibration import rate_bytes
    assert sum(rate_bytes(LLAMA6, run.plan, m, spec, 32).values()) == 0
    assert sum(rate_bytes(LLAMA6, run.plan, m, spec, 1).values()) == sum(u.nbytes for u in LLAMA6.units
                                                                        if u.kind != "embedding")








def test_graph_warmup_steps_hand_worked():
    """llama.cpp's CUDA backend warms a graph up over two steps whenever its shapes change: the first two decode
    steps after the prompt, and two more from the step at which the shared cache's cells, rounded up to 256, grow.
    48 sequences of 16 prompt tokens: step s holds 48 x (16 + s) cells, 816 (4 x 256) at s = 1 and 1056 (5 x 256)
    from s = 6 on; a 250-token prompt crosses 256 at s = 7 (257 cells); a request with one decode step has one."""
    from sim.engines.llamacpp.graphs import graph_warmup_steps
    assert graph_warmup_steps(Workload(batch=1, prompt_tokens=1, new_tokens=17)) == [1, 2]
    assert graph_warmup_steps(Workload(batch=48, prompt_tokens=16, new_tokens=9)) == [1, 2, 6, 7]
    assert graph_warmup_steps(Workload(batch=1, prompt_tokens=250, new_tokens=12)) == [1, 2, 7, 8]
    assert graph_warmup_steps(Workload(batch=1, prompt_tokens=8, new_tokens=2)) == [1]
    assert graph_warmup_steps(Workload(batch=1, prompt_tokens=8, new_tokens=1)) == []


def test_llamacpp_gpu_units_pay_the_graph_warmup_on_those_steps_only():
    """With gpu_graph_warmup_op_s, a unit llama.cpp computes on the GPU pays it per ggml operator on the warm-up
    steps (1 and 2 of a short request) and never after; a CPU-computed unit never. A run that follows an identical
    one (graphs_warm: llama-bench's repetitions) pays nothing, in the prediction and in the fit's count; another
    pays 2 steps x the GPU's operators over its decode steps, per token."""
    import numpy as np
    from hwmodels.presets import load_machine
    from validate.peer_calibration import features, predict
    m = load_machine("h200-testbox")
    spec = costs_of(m, "llamacpp")
    w = Workload(batch=1, prompt_tokens=4, new_tokens=6)
    plan = llamacpp_ngl(LLAMA6, m, w, Budgets.of(m), 3)  # three decoders and the embedding on the CPU

    def compute(cost: float) -> np.ndarray:
        mm = with_peer(m, "llamacpp", spec.model_copy(update={"gpu_graph_warmup_op_s": cost}))
        return np.asarray(build_schedule(LLAMA6, mm, plan, w, Budgets.of(mm)).compute_s)
    extra = (compute(1e-3) - compute(0.0)).reshape(w.new_tokens, len(LLAMA6.units))
    t = plan.tiers()
    want = np.array([1e-3 * ggml_ops(u.kind, LLAMA6.family) if t[u.name].compute == "gpu" else 0.0
                     for u in LLAMA6.units])
    assert want.sum() > 0 and (want == 0).sum() >= 4
    for s in range(w.new_tokens):
        assert extra[s] == pytest.approx(want if s in (1, 2) else 0 * want)
    mm = with_peer(m, "llamacpp", spec.model_copy(update={"gpu_graph_warmup_op_s": 1e-3}))
    cold = PeerRun("cold", plan, w, Budgets.of(m), 1.0, float("nan"))
    warm = PeerRun("warm", plan, w, Budgets.of(m), 1.0, float("nan"), graphs_warm=True)
    base = predict(LLAMA6, with_peer(m, "llamacpp", spec.model_copy(update={"gpu_graph_warmup_op_s": 0.0})), cold)
    assert predict(LLAMA6, mm, warm)["time_per_token_s"] == pytest.approx(base["time_per_token_s"])
    assert predict(LLAMA6, mm, cold)["time_per_token_s"] > base["time_per_token_s"]
    gpu_ops = sum(ggml_ops(u.kind, LLAMA6.family) for u in LLAMA6.units if t[u.name].compute == "gpu")
    assert features(LLAMA6, cold, ("gpu_graph_warmup_op_s",)).tolist() == [pytest.approx(2 * gpu_ops / 5)]
    assert features(LLAMA6, warm, ("gpu_graph_warmup_op_s",)).tolist() == [0.0]


def test_llamacpp_flash_attention_auto_is_off_everywhere_once_an_attention_cannot_fuse_where_it_runs():
    """llama.cpp's -fa auto (resolve_fused_ops): with ggml-cuda's kernels every attention fuses; without them one
    GPU attention turns it off on the CPU too; -ngl 0 and -ngl 1 (the head alone on the GPU: no attention there)
    keep it on; -fa off and on force the CPU's, and the GPU fuses only with its kernels."""
    from hwmodels.presets import load_machine
    from sim.engines.llamacpp.graphs import ggml_flash_attention
    m = load_machine("h200-testbox")
    w = Workload(batch=1, prompt_tokens=4, new_tokens=3)

    def fa(ngl: int, kernels: bool, mode: str = "auto") -> dict:
        return ggml_flash_attention(LLAMA6, llamacpp_ngl(LLAMA6, m, w, Budgets.of(m), ngl), kernels, mode)
    assert fa(3, True) == {"cpu": True, "gpu": True}
    assert fa(3, False) == {"cpu": False, "gpu": False}
    assert fa(0, False) == {"cpu": True, "gpu": False} and fa(1, False)["cpu"] and not fa(2, False)["cpu"]
    assert fa(0, True, "off") == {"cpu": False, "gpu": False} and fa(3, False, "on") == {"cpu": True, "gpu": False}


def test_llamacpp_cpu_attention_unfused_pays_three_operators_and_its_own_cost_on_one_token_steps():
    """-ngl 3 keeps 4 of LLAMA6's 6 decoders on the CPU. Without ggml-cuda's kernels (flash attention then off) each
    pays 3 operators more (the scores' mul_mat, soft_max, the product with V and a cont against one flash_attn_ext:
    22 against 19, sim.model.shapes.FLASH_ATTN_SAVED_OPS) on every step, and cpu_mm_attention_s on a step of one token:
    1 ms x 4 + 3 x 10 us x 4 = 4.12 ms; nothing on the embedding, the head or a GPU decoder; nothing at -ngl 0 (no
    GPU attention keeps it on). The fit counts the same; a host twice as fast halves the cost."""
    import numpy as np
    from hwmodels.presets import load_machine
    from sim.engines.llamacpp.fitting import host_scaled
    from validate.peer_calibration import features
    m = load_machine("h200-testbox")
    spec = costs_of(m, "llamacpp").model_copy(update={"cpu_op_s": 1e-5, "cpu_mm_attention_s": 1e-3,
                                                  "gpu_mm_attention_s": 0.0})
    assert ggml_ops("decoder", "llama") == 22 and ggml_ops("decoder", "llama", flash_attention=True) == 19
    assert ggml_ops("lm_head", "llama", flash_attention=True) == 3

    def compute(ngl: int, w: Workload, **update):
        plan = llamacpp_ngl(LLAMA6, m, w, Budgets.of(m), ngl)
        mm = with_peer(m, "llamacpp", spec.model_copy(update=update))
        return np.asarray(build_schedule(LLAMA6, mm, plan, w, Budgets.of(mm)).compute_s), plan

    one = Workload(batch=1, prompt_tokens=4, new_tokens=3)
    (fused, plan), (split, _) = compute(3, one), compute(3, one, flash_attention=False)
    extra = (split - fused).reshape(one.new_tokens, len(LLAMA6.units))
    t = plan.tiers()
    cpu_decoder = [u.kind == "decoder" and t[u.name].compute == "cpu" for u in LLAMA6.units]
    assert sum(cpu_decoder) == 4
    assert extra[0].tolist() == pytest.approx([3e-5 if c else 0.0 for c in cpu_decoder])  # the prompt's step
    for s in range(1, one.new_tokens):
        assert extra[s].tolist() == pytest.approx([1e-3 + 3e-5 if c else 0.0 for c in cpu_decoder])
    assert extra[1:].sum() / 2 == pytest.approx(4.12e-3)
    assert compute(0, one, flash_attention=False)[0] == pytest.approx(compute(0, one)[0])
    four = Workload(batch=4, prompt_tokens=4, new_tokens=3)
    four_extra = compute(3, four, flash_attention=False)[0] - compute(3, four)[0]
    assert four_extra.sum() == pytest.approx(3 * 4 * 3e-5)  # operators on every step, no per-attention cost
    runs = {fa: PeerRun("r", plan, one, Budgets.of(m), 1.0, float("nan"), peer_update={"flash_attention": fa})
            for fa in (True, False)}
    cpu_ops = sum(ggml_ops(u.kind, "llama") for u in LLAMA6.units if t[u.name].compute == "cpu")
    assert features(LLAMA6, runs[False], ("cpu_op_s", "cpu_mm_attention_s")).tolist() == [cpu_ops, 4.0]
    assert features(LLAMA6, runs[True], ("cpu_op_s", "cpu_mm_attention_s")).tolist() == [cpu_ops - 12, 0.0]
    assert host_scaled(spec, 2.0).cpu_mm_attention_s == pytest.approx(5e-4)


def test_llamacpp_without_flash_attention_pays_its_attention_kernels_on_one_token_steps():
    """A build without fused attention (flash_attention False) pays gpu_mm_attention_s per GPU-computed decoder on
    a step of one token: -ngl 3 puts the head and the last 2 of LLAMA6's 6 decoders on the GPU (llama.cpp counts
    the head as a layer), so 2 x 1 ms on every such step, nothing on a CPU decoder, the head or the embedding;
    nothing with the kernels (the default), nor on a step of 4 sequences; and the fit counts 2 per token for a run
    of that build (PeerRun.peer_update), 0 for one with the kernels."""
    import numpy as np
    from hwmodels.presets import load_machine
    from validate.peer_calibration import features, predict
    m = load_machine("h200-testbox")
    # the CPU's own unfused attention (test below) left out here: its operators and its cost
    spec = costs_of(m, "llamacpp").model_copy(update={"gpu_mm_attention_s": 1e-3, "cpu_op_s": 0.0,
                                                  "cpu_mm_attention_s": 0.0})
    assert spec.flash_attention  # llama.cpp's default build

    def compute(w: Workload, **update) -> np.ndarray:
        plan = llamacpp_ngl(LLAMA6, m, w, Budgets.of(m), 3)
        mm = with_peer(m, "llamacpp", spec.model_copy(update=update))
        return np.asarray(build_schedule(LLAMA6, mm, plan, w, Budgets.of(mm)).compute_s), plan

    one = Workload(batch=1, prompt_tokens=4, new_tokens=3)
    (fused, plan), (split, _) = compute(one), compute(one, flash_attention=False)
    extra = (split - fused).reshape(one.new_tokens, len(LLAMA6.units))
    t = plan.tiers()
    want = [1e-3 if u.kind == "decoder" and t[u.name].compute == "gpu" else 0.0 for u in LLAMA6.units]
    assert sum(want) == pytest.approx(2e-3)
    for s in range(1, one.new_tokens):  # step 0 is the prompt's
        assert extra[s].tolist() == pytest.approx(want)
    four = Workload(batch=4, prompt_tokens=4, new_tokens=3)
    assert compute(four, flash_attention=False)[0] == pytest.approx(compute(four)[0])
    run = PeerRun("no fa", plan, one, Budgets.of(m), 1.0, float("nan"), peer_update={"flash_attention": False})
    assert features(LLAMA6, run, ("gpu_mm_attention_s",)).tolist() == [2.0]
    assert features(LLAMA6, PeerRun("fa", plan, one, Budgets.of(m), 1.0, float("nan")),
                    ("gpu_mm_attention_s",)).tolist() == [0.0]
    mm = with_peer(m, "llamacpp", spec)
    per_token = predict(LLAMA6, mm, run)["time_per_token_s"] - predict(LLAMA6, mm, dataclasses.replace(
        run, peer_update={}))["time_per_token_s"]
    assert per_token == pytest.approx(2e-3, rel=0.05)


MOE_CFG = {"model_type": "qwen3_moe", "hidden_size": 256, "moe_intermediate_size": 64, "num_hidden_layers": 4,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000,
           "num_local_experts": 8, "num_experts_per_tok": 2}


def test_llamacpp_n_cpu_moe_keeps_the_first_blocks_routed_experts_on_the_cpu():
    """-ngl 5 --n-cpu-moe 2 on 4 blocks: everything but the embedding on the GPU, except the 8 routed experts of
    blocks 0 and 1 (16 units), whose attention stays on the GPU; --n-cpu-moe 0 is -ngl alone."""
    from hwmodels.presets import load_machine
    m = load_machine("h200-testbox")
    shape = shape_from_config(MOE_CFG)
    w = Workload(batch=1, prompt_tokens=1, new_tokens=4)
    b = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=2**34, pinned_bytes=0)
    t = llamacpp_ngl(shape, m, w, b, 5, n_cpu_moe=2).tiers()
    on_cpu = {u.name for u in shape.units if t[u.name].compute == "cpu"}
    assert on_cpu == {"model.embed_tokens"} | {f"model.layers.{i}.mlp.experts.{e}" for i in (0, 1) for e in range(8)}
    assert t["model.layers.0"].compute == "gpu" and t["model.layers.0"].tier == "vram"
    plain = llamacpp_ngl(shape, m, w, b, 5).tiers()
    assert {u.name for u in shape.units if plain[u.name].compute == "cpu"} == {"model.embed_tokens"}


def test_llamacpp_prices_a_blocks_routed_experts_as_one_set_of_ggml_operators():
    """ggml multiplies a block's routed experts with one MUL_MAT_ID per fused weight, then a GLU, the routing
    weights' MUL and k - 1 ADDs (llama-graph.cpp, build_moe_ffn): 5 + 1 = 6 operators for k = 2, once per block and
    step whatever experts run. With every routed expert on the CPU and a CPU operator cost of 1 ms (all else
    unchanged), a one-token step's expert items carry 4 blocks x 6 x 1 ms = 24 ms more than at no operator cost;
    the fit's linear count pays cpu_op_s 1 + 24 times a token (the embedding's GET_ROWS and the blocks' experts)."""
    from hwmodels.presets import load_machine
    from sim.model.shapes import ggml_moe_ops
    assert ggml_moe_ops(2) == 6 and ggml_moe_ops(8) == 12 and ggml_moe_ops(1) == 6  # one expert: a CONT, no ADD
    m = load_machine("h200-testbox")
    shape = shape_from_config(MOE_CFG)
    w = Workload(batch=1, prompt_tokens=1, new_tokens=3)
    b = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=2**34, pinned_bytes=0)
    plan = llamacpp_ngl(shape, m, w, b, 5, n_cpu_moe=4)
    steps = []
    for op_s in (0.0, 1e-3):
        peer = costs_of(m, "llamacpp").model_copy(update={"cpu_op_s": op_s})
        sch = build_schedule(shape, with_peer(m, "llamacpp", peer), plan, w, b)
        steps.append(sum(c for ui, s, c in zip(sch.unit, sch.step, sch.compute_s)
                         if s == 1 and shape.units[ui].kind == "expert"))
    assert steps[1] - steps[0] == pytest.approx(4 * 6 * 1e-3, rel=1e-9)
    from validate.peer_calibration import features
    run = PeerRun("ncmoe", plan, w, b, 1.0, float("nan"))
    assert features(shape, run, ("cpu_op_s",)).tolist() == [25.0]












def test_llamacpp_no_mmap_pins_the_cpu_weights_and_a_prefill_copies_them_at_the_pinned_speed():
    """llama.cpp maps the model file by default (its CPU weights pageable: "avoid using a host buffer when using
    mmap"); with --load-mode none it reads them into CUDA_Host buffers, pinned. A 128-token prefill multiplies CPU-held
    weights on the GPU, so each decoder is copied in at the link's pageable or pinned speed (sim.costs.equations
    copy_time_s); a token's decode computes them on the CPU either way. Without a pinned budget that holds them,
    that is refused in one sentence that names the budget."""
    from hwmodels.presets import load_machine
    from sim.costs.equations import copy_time_s
    m = load_machine("h200-testbox")
    w = Workload(batch=1, prompt_tokens=128, new_tokens=2)
    b = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=2**36, pinned_bytes=2**36)
    dec = next(u for u in LLAMA6.units if u.kind == "decoder")
    for mapped, tier in ((True, "ram_pageable"), (False, "ram_pinned")):
        plan = llamacpp_ngl(LLAMA6, m, w, b, 0, mapped=mapped)
        assert {p.tier for p in plan.placements if p.compute == "cpu"} == {tier}
        sch = build_schedule(LLAMA6, m, plan, w, b)
        copies = [c for ui, s, c in zip(sch.unit, sch.step, sch.copy_s) if s == 0 and ui == LLAMA6.units.index(dec)]
        assert copies == [pytest.approx(copy_time_s(dec.nbytes, m, pinned=not mapped))]
    assert copy_time_s(dec.nbytes, m, pinned=True) < copy_time_s(dec.nbytes, m, pinned=False)
    small = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=2**36, pinned_bytes=2**30)
    with pytest.raises(PlanError, match=r"--load-mode none pins its CPU weights .* 1\.00 GiB; raise --pinned"):
        llamacpp_ngl(LLAMA6, m, w, small, 0, mapped=False)
    tight = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=2**30, pinned_bytes=2**36)  # RAM is what runs out
    with pytest.raises(PlanError, match=r"the ram budget is 1\.00 GiB; raise --ram"):
        llamacpp_ngl(LLAMA6, m, w, tight, 0, mapped=False)


def test_llamacpp_planner_pins_the_cpu_weights_only_where_it_pays_and_the_export_says_load_mode_none():
    """plan --engine llamacpp: for a whole request (--objective total: its 512-token prompt counts) with a pinned
    budget that holds the CPU weights, --load-mode none wins (its prefill copies them pinned); ranked by time per
    token alone (one sequence: no decode step is offloaded) the mapped file (the default, nothing pinned) is kept;
    without a pinned budget it is never chosen. The export writes it exactly when the plan pins CPU weights (this
    llama.cpp has no --no-mmap)."""
    from hwmodels.presets import load_machine
    from sim.engines.llamacpp.export import to_llamacpp
    m = load_machine("h200-testbox")
    w = Workload(batch=1, prompt_tokens=512, new_tokens=4)
    vram = LLAMA6.total_bytes // 2
    pinned = Budgets(vram_bytes=vram, ram_bytes=2**36, pinned_bytes=2**36)
    none = Budgets(vram_bytes=vram, ram_bytes=2**36, pinned_bytes=0)
    req = plan_for_engine("llamacpp", LLAMA6, m, w, pinned, objective="total")
    pin = ["--load-mode", "none"]
    exp = to_llamacpp(LLAMA6, req.plan, w)
    assert "--load-mode none" in req.plan.policy and exp["args"][2:4] == pin and "--load-mode none" in exp["command"]
    mapped = plan_for_engine("llamacpp", LLAMA6, m, w, none, objective="total")
    assert "--load-mode" not in mapped.plan.policy and "--load-mode" not in to_llamacpp(LLAMA6, mapped.plan, w)["args"]
    assert req.summary["ttft_s"] < mapped.summary["ttft_s"]
    tok = plan_for_engine("llamacpp", LLAMA6, m, w, pinned)
    assert "--load-mode" not in tok.plan.policy


def test_llamacpp_planner_offloads_an_moes_routed_experts_with_n_cpu_moe_when_that_is_fastest():
    """plan --engine llamacpp on an MoE searches --n-cpu-moe N (every layer on the GPU but the routed experts of
    the first N blocks) beside -ngl: with half the weights' VRAM, its plan is no slower than any -ngl placement that
    fits, keeps the attention of every block on the GPU, and exports as --n-cpu-moe N with --poll 100 (the CPU's
    turns come between the GPU's blocks); with all the VRAM it needs,
    nothing is left on the CPU but the embedding (the tie goes to fewer CPU bytes)."""
    from hwmodels.presets import load_machine
    from planner.engines import _simulate
    from sim.engines.llamacpp.export import to_llamacpp
    m = load_machine("h200-testbox")
    shape = shape_from_config(dict(MOE_CFG, hidden_size=2048, moe_intermediate_size=1024, num_local_experts=64,
                                   num_experts_per_tok=8, head_dim=128, num_attention_heads=16,
                                   num_key_value_heads=16))  # OLMoE's layer, as llamacpp-ae.json timed it
    w = Workload(batch=1, prompt_tokens=1, new_tokens=4)
    b = Budgets(vram_bytes=shape.total_bytes // 2, ram_bytes=2**36, pinned_bytes=0)
    rep = plan_for_engine("llamacpp", shape, m, w, b)
    ngl_only = []
    for ngl in range(shape.n_blocks + 2):
        try:
            ngl_only.append(_simulate(shape, m, llamacpp_ngl(shape, m, w, b, ngl), w, b)["time_per_token_s"])
        except PlanError:
            pass
    assert ngl_only and rep.time_per_token_s <= min(ngl_only) * (1 + 1e-9)
    assert "--n-cpu-moe" in rep.plan.policy
    t = rep.plan.tiers()
    assert all(t[u.name].compute == "gpu" for u in shape.units if u.kind == "decoder")
    exp = to_llamacpp(shape, rep.plan, w)
    n = exp["n_cpu_moe"]
    assert exp["args"][:4] == ["-ngl", str(shape.n_blocks + 1), "--n-cpu-moe", str(n)] and 0 < n <= shape.n_blocks
    assert exp["runtime_args"][-2:] == ["--poll", "100"]  # CPU turns between GPU blocks: its threads keep polling
    assert {u.block for u in shape.units if u.kind == "expert" and t[u.name].compute == "cpu"} == set(range(n))
    full = plan_for_engine("llamacpp", shape, m, w, Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=2**36,
                                                            pinned_bytes=0))
    assert {u.kind for u in shape.units if full.plan.tiers()[u.name].compute == "cpu"} == {"embedding"}




def test_llamacpp_policy_fits_an_moe_as_its_fit_does():
    """llama.cpp's --fit (common/fit.cpp) on an MoE: layers from the back with their routed experts in system memory,
    except the first GPU block's (fit.cpp counts the output among the partial layers, so one block stays whole: its
    trace measured so in lab/data/peers/llamacpp-{aj,ak}.json); where every layer fits with every expert on the CPU, the experts of the
    first blocks join them while they fit and the last blocks' stay on the CPU. Mixtral-8x7B on the H200: one
    block's experts are 8 x 3 x 4096 x 14336 x 2 B = 2.82 GB, more than 2 GiB, so at 2 GiB no block fits beside the
    output (-ngl 1), though some of its 32 attention units (80 MiB each) would; at 40 GiB every attention does."""
    from hwmodels.presets import load_machine
    from sim.model.resolve import load_model
    m = load_machine("h200-testbox")
    shape = load_model("mixtral-8x7b")
    w = Workload(batch=1, prompt_tokens=64, new_tokens=4)
    for gib in (2, 40):
        b = Budgets.of(m, vram=gib * 2**30)
        t = POLICIES["llamacpp"](shape, m, w, b).tiers()
        gpu_experts = sorted({u.block for u in shape.units if u.kind == "expert" and t[u.name].compute == "gpu"})
        cpu_attention = [u.block for u in shape.units if u.kind == "attention" and t[u.name].compute == "cpu"]
        if gib == 2:
            assert gpu_experts == [] and len(cpu_attention) == shape.n_blocks and t["lm_head"].tier == "vram"
            llamacpp_ngl(shape, m, w, b, 2, n_cpu_moe=shape.n_blocks)  # the last block's attention alone would fit
        else:
            k = len(gpu_experts)
            assert cpu_attention == [] and gpu_experts == list(range(k)) and 0 < k < shape.n_blocks
            # the first k blocks' experts fit beside every attention (the placement is feasible as such) ...
            llamacpp_ngl(shape, m, w, b, shape.n_blocks + 1, cpu_expert_blocks=range(k, shape.n_blocks))
            with pytest.raises(PlanError):  # ... and one more block's experts do not
                llamacpp_ngl(shape, m, w, b, shape.n_blocks + 1, cpu_expert_blocks=range(k + 1, shape.n_blocks))




def _bench_records(shape, machine, scale: float, ngls=(0, 3, 7), n_gen: int = 32) -> list[dict]:
    """llama-bench generation records of a host whose CPU runs llama.cpp `scale` times as fast as the preset's:
    each record's time is the engine model's with the preset's CPU speeds scaled (hand-set truth to recover)."""
    from sim.engines.llamacpp.bench import run_of
    from sim.engines.llamacpp.fitting import host_scaled
    from validate.peer_calibration import predict, with_peer
    truth = with_peer(machine, "llamacpp", host_scaled(costs_of(machine, "llamacpp"), scale))
    out = []
    for ngl in ngls:
        rec = {"n_prompt": 0, "n_gen": n_gen, "n_gpu_layers": ngl, "avg_ns": 1.0, "use_mmap": True}
        t = predict(shape, truth, run_of(rec, shape, truth, None, ""))["time_per_token_s"]
        out.append(dict(rec, avg_ns=t * n_gen * 1e9, samples_ns=[t * n_gen * 1e9] * 3))
    return out


def test_host_scale_multiplies_every_cpu_speed_and_divides_the_operator_cost():
    from hwmodels.presets import load_machine
    from sim.engines.llamacpp.fitting import host_scaled
    spec = costs_of(load_machine("h200-testbox"), "llamacpp")
    s = host_scaled(spec, 2.0)
    assert s.cpu_bytes_per_s == 2 * spec.cpu_bytes_per_s and s.cpu_cache_bytes_per_s == 2 * spec.cpu_cache_bytes_per_s
    assert s.cpu_head_bytes_per_s == 2 * spec.cpu_head_bytes_per_s and s.cpu_flops_per_s == 2 * spec.cpu_flops_per_s
    assert s.cpu_op_s == spec.cpu_op_s / 2 and s.gpu_op_s == spec.gpu_op_s and s.step_s == spec.step_s


def test_calibrate_host_recovers_a_known_cpu_speed_from_llama_bench_records():
    """Records timed as a host 1.3x as fast would time them: the fitted scale is 1.3, and after it every record's
    prediction matches; a record with every layer on the GPU does not count (nothing of the CPU in it)."""
    from hwmodels.presets import load_machine
    from hwmodels.units import InputError
    from sim.engines.llamacpp.bench import calibrate_host
    m = load_machine("h200-testbox")
    recs = _bench_records(LLAMA6, m, 1.3, ngls=(0, 3, 7))
    got, rep = calibrate_host(LLAMA6, m, recs, "test")
    assert rep["host_cpu_scale"] == pytest.approx(1.3, rel=1e-3)
    assert [r["used"] for r in rep["runs"]] == [True, True, False]  # -ngl 7 of 6 blocks: all on the GPU
    assert all(r["after_s"] == pytest.approx(r["measured_s"], rel=1e-3) for r in rep["runs"])
    assert rep["runs"][0]["before_s"] > rep["runs"][0]["measured_s"]  # the preset's slower CPU
    assert costs_of(got, "llamacpp").cpu_bytes_per_s == pytest.approx(1.3 * costs_of(m, "llamacpp").cpu_bytes_per_s, rel=1e-3)
    said = got.sources["peers.llamacpp.cpu_bytes_per_s"]
    assert "1.300" in said and "test" in said
    with pytest.raises(InputError, match="says nothing of this host's CPU"):
        calibrate_host(LLAMA6, m, recs[2:], "test")
    with pytest.raises(InputError, match="no generation test"):
        calibrate_host(LLAMA6, m, [dict(recs[0], n_gen=0, n_prompt=128)], "test")
    with pytest.raises(InputError, match="at the edge"):  # 10x: no single factor of a similar host stands for it
        calibrate_host(LLAMA6, m, _bench_records(LLAMA6, m, 10.0, ngls=(0,)), "test")


def test_calibrate_host_reports_how_far_the_host_moved_a_setting_timed_twice():
    """-ngl 0 timed again 1.5x slower (a slow spell): its floor is (1.5 - 1) / (1.5 + 1) = 20%, the least any one
    prediction misses both timings by; -ngl 3 timed once is no repeat; without a repeat, no floor."""
    from hwmodels.presets import load_machine
    from sim.engines.llamacpp.bench import calibrate_host
    m = load_machine("h200-testbox")
    recs = _bench_records(LLAMA6, m, 1.0, ngls=(0, 3))
    slow = dict(recs[0], avg_ns=recs[0]["avg_ns"] * 1.5, samples_ns=[x * 1.5 for x in recs[0]["samples_ns"]])
    _, rep = calibrate_host(LLAMA6, m, recs + [slow], "test")
    assert rep["repeats"]["settings"] == 1 and rep["repeats"]["worst_floor_pct"] == pytest.approx(20.0)
    assert 1.0 / 1.5 < rep["host_cpu_scale"] < 1.0  # the slow timing pulls the scale, the fast one holds it
    _, rep = calibrate_host(LLAMA6, m, recs + [dict(slow, flash_attn=0)], "test")  # another -fa: another setting
    assert rep["repeats"] == {"settings": 0, "worst_floor_pct": None, "median_floor_pct": None}


def test_calibrate_peer_cli_writes_a_profile_that_simulate_uses(tmp_path, capsys):
    """offloadsim calibrate-peer MODEL --bench llama-bench.json: the profile it writes carries the host's llama.cpp
    costs (simulate --policy llamacpp on it predicts the benchmarked time); bad records are one sentence."""
    import json
    from hwmodels.presets import load_machine
    from offloadsim.cli import main
    from sim.model.resolve import preset_config
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(dict(preset_config("llama-3.1-8b"), num_hidden_layers=6)))
    m = load_machine("h200-testbox")
    recs = _bench_records(LLAMA6, m, 0.8, ngls=(0,))
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(recs))
    out = tmp_path / "p.json"
    assert main(["calibrate-peer", str(cfg), "--bench", str(bench), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "0.800x" in text and str(out) in text
    prof = load_machine(str(out))
    assert costs_of(prof, "llamacpp").cpu_bytes_per_s == pytest.approx(0.8 * costs_of(m, "llamacpp").cpu_bytes_per_s, rel=1e-3)
    # 1.1 GiB of VRAM holds llama.cpp at -ngl 0 (its compute buffer for 34 tokens: the output's 1.05 GB copy, the
    # logits and a query's copy, 1.03 GiB) but not the output on the GPU with a block's copies beside it (1.12 GiB):
    # its own placement is -ngl 0, the benchmarked setting, and the profile predicts what the host measured (the
    # preset, its slower time)
    for machine, want in ((str(out), recs[0]["avg_ns"] / 32e9), ("h200-testbox", None)):
        assert main(["simulate", str(cfg), "--machine", machine, "--policy", "llamacpp", "--new-tokens", "33",
                     "--prompt-tokens", "1", "--vram", "1.1GiB", "--json"]) == 0
        got = json.loads(capsys.readouterr().out)["time_per_token_s"]
        if want:
            assert got == pytest.approx(want, rel=0.02)
        else:
            assert got < 0.85 * recs[0]["avg_ns"] / 32e9  # the preset's CPU, 1 / 0.8 as fast
    # JSON lines (llama-bench -o jsonl) read alike, a byte-order mark and blank space before either allowed; a
    # record without its time is refused in one sentence
    bench.write_bytes(b"\xef\xbb\xbf \n" + json.dumps(recs).encode())
    assert main(["calibrate-peer", str(cfg), "--bench", str(bench), "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_cpu_scale"] == pytest.approx(0.8, rel=1e-3)
    bench.write_text("\n" + "\n".join(json.dumps(r) for r in recs))
    assert main(["calibrate-peer", str(cfg), "--bench", str(bench), "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_cpu_scale"] == pytest.approx(0.8, rel=1e-3)
    bench.write_text(json.dumps([{k: v for k, v in recs[0].items() if k != "avg_ns"}]))
    before = out.read_text()
    assert main(["calibrate-peer", str(cfg), "--bench", str(bench), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "record 0" in err and "'avg_ns'" in err and "Traceback" not in err and out.read_text() == before


def test_llamacpp_fit_places_layers_in_what_its_context_reserves():
    """llama.cpp's GPU memory (sim/engines/llamacpp/ggml_memory.py) for Llama-3.1-8B's layers (hidden 4096, MLP 14336, 8 KV heads of
    128, vocabulary 128256; 16-bit) and a request of 128 + 8 tokens: a context of 136 tokens, its KV cache padded to
    256 cells (4096 B a token a layer: 1 MiB a GPU layer), a micro-batch of 136. The compute buffer is the larger of
    the logits (4 x 128256 x 136 = 69,771,264 B) and a CPU block's peak: its query matrix's copy (4096 x 4096 x 2 =
    33,554,432 B), left as a hole below live states, and above it its MLP matrix's (4096 x 14336 x 2 = 117,440,512
    B; not the whole block), plus two FP32 hidden states (2 x 4 x 136 x 4096 = 4,456,448 B).
    With every block on the GPU it is the logits'; with the output on the CPU (-ngl 0) the output's weight is
    copied beside the logits, above the query copy's hole; a context under 32 tokens copies nothing. --fit (the
    policy) places from the back while that fits: with room for the output and exactly three blocks, -ngl 4; a
    byte less, -ngl 3."""
    from hwmodels.presets import load_machine
    from sim.costs.memory import memory_use
    from sim.plan import Budgets, Workload
    from sim.engines.llamacpp.placement import llamacpp
    from sim.engines.llamacpp.layout import llamacpp_ngl
    m = load_machine("h200-testbox")
    w = Workload(batch=1, prompt_tokens=128, new_tokens=8)
    size = {u.kind: u.nbytes for u in LLAMA6.units}
    head_matrix, mlp, logits, states = 128256 * 4096 * 2, 4096 * 14336 * 2, 4 * 128256 * 136, 2 * 4 * 136 * 4096
    query = 4096 * 4096 * 2
    need = size["lm_head"] + 3 * (size["decoder"] + 2**20) + query + mlp + states
    for vram, want in ((need, 4), (need - 1, 3)):
        plan = llamacpp(LLAMA6, m, w, Budgets(vram_bytes=vram, ram_bytes=100 * 2**30, pinned_bytes=0))
        t = plan.tiers()
        gpu = [u.block for u in LLAMA6.units if u.kind == "decoder" and t[u.name].compute == "gpu"]
        assert t["lm_head"].tier == "vram" and gpu == list(range(6 - (want - 1), 6))
    b = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=100 * 2**30, pinned_bytes=0)
    every = memory_use(LLAMA6, llamacpp_ngl(LLAMA6, m, w, b, 7), w, b)
    assert every.slot_bytes == 0 and every.staging_vram_bytes == logits + states and every.kv_bytes == 6 * 2**20
    three = memory_use(LLAMA6, llamacpp_ngl(LLAMA6, m, w, b, 3), w, b)
    assert three.slot_bytes == mlp and three.staging_vram_bytes == query + mlp + states and three.kv_bytes == 2 * 2**20
    none = memory_use(LLAMA6, llamacpp_ngl(LLAMA6, m, w, b, 0), w, b)
    assert none.resident_vram_bytes == 0 and none.kv_bytes == 0
    assert none.staging_vram_bytes == logits + head_matrix + query + states  # the copy above the query's hole
    short = Workload(batch=1, prompt_tokens=1, new_tokens=8)  # 9 tokens: no copies, the logits of 9
    assert memory_use(LLAMA6, llamacpp_ngl(LLAMA6, m, short, b, 3), short, b).staging_vram_bytes == \
        4 * 128256 * 9 + 2 * 4 * 9 * 4096


def test_plan_engine_llamacpp_names_the_compute_buffer_when_even_ngl_0_does_not_fit():
    """-ngl 0 of LLAMA6 with a 128-token prompt: the output's matrix (128256 x 4096 x 2 = 1,050,673,152 B) is copied
    to the GPU beside the logits (69,771,264 B), above a query copy's hole (33,554,432 B), with two hidden states
    (4,456,448 B): 1.08 GiB. A 0.5 GiB budget is refused in one sentence naming the compute buffer; 1.5 GiB runs
    it."""
    from hwmodels.presets import load_machine
    from planner.engines import plan_for_engine
    from sim.plan import Budgets, Workload
    m = load_machine("h200-testbox")
    w = Workload(batch=1, prompt_tokens=128, new_tokens=8)
    rep = plan_for_engine("llamacpp", LLAMA6, m, w, Budgets(vram_bytes=2**29, ram_bytes=100 * 2**30, pinned_bytes=0))
    assert rep.plan is None and "compute buffer 1.08 GiB" in rep.reason and "raise --vram" in rep.reason
    assert rep.reason.endswith(".") and ". " not in rep.reason  # one sentence
    ok = plan_for_engine("llamacpp", LLAMA6, m, w, Budgets(vram_bytes=3 * 2**29, ram_bytes=100 * 2**30,
                                                           pinned_bytes=0))
    assert ok.plan is not None


def test_moe_compute_buffer_holds_one_fused_expert_tensor_and_shapes_know_their_largest_tensor():
    """MOE_CFG's blocks: 8 experts of 3 matrices 256 x 64 (16-bit: 32,768 B each), fused by llama.cpp into one tensor
    per matrix (8 x 32,768 = 262,144 B). With the experts of blocks 0-1 on the CPU (--n-cpu-moe 2) and a context of
    1024 tokens (micro-batch 512), the compute buffer is the larger of the logits (4 x 1000 x 512 = 2,048,000 B)
    and one fused tensor with the experts' FP32 gate and up outputs (2 x 4 x 512 x 2 experts x 64 = 524,288 B),
    plus two hidden states (2 x 4 x 512 x 256 = 1,048,576 B); the largest tensors come from the config: an expert's
    256 x 64, an attention's query 256 x 256, the output's 1000 x 256."""
    from hwmodels.presets import load_machine
    from sim.engines.llamacpp.ggml_memory import ggml_compute_bytes, ggml_largest_copy
    from sim.plan import Budgets, Workload
    from sim.engines.llamacpp.layout import llamacpp_ngl
    shape = shape_from_config(MOE_CFG)
    big = {u.kind: u.max_tensor_nbytes for u in shape.units}
    assert big["expert"] == 256 * 64 * 2 and big["attention"] == 256 * 256 * 2 and big["lm_head"] == 1000 * 256 * 2
    m = load_machine("h200-testbox")
    w = Workload(batch=1, prompt_tokens=1000, new_tokens=24)
    b = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=100 * 2**30, pinned_bytes=0)
    plan = llamacpp_ngl(shape, m, w, b, 5, n_cpu_moe=2)
    assert ggml_largest_copy(shape, plan, w) == 8 * 256 * 64 * 2
    assert ggml_compute_bytes(shape, plan, w) == 4 * 1000 * 512 + 2 * 4 * 512 * 256
    wide = shape.model_copy(update={"units": tuple(u.model_copy(update={"max_tensor_nbytes": 2**20})
                                                   if u.kind == "expert" else u for u in shape.units)})
    assert ggml_compute_bytes(wide, plan, w) == 8 * 2**20 + 2 * 4 * 512 * 2 * 64 + 2 * 4 * 512 * 256


def test_llamacpp_prefill_pays_the_pinned_split_cost_for_pinned_weights_only():
    """A prompt of 128 tokens on -ngl 3 of six blocks (three CPU blocks, copied to the GPU weight by weight): with
    the CPU's weights pinned (-lm none) each of their weight tensors costs gpu_offload_split_pinned_s, mapped ones
    gpu_offload_split_s. Raising the pinned cost by X lengthens the pinned prompt by X times the CPU blocks' weight
    tensors (ggml_weights: nine a Llama block) and leaves the mapped prompt alone; absent, it is the mapped cost."""
    from hwmodels.presets import load_machine
    from sim.plan import Budgets, Workload
    from sim.engines.llamacpp.layout import llamacpp_ngl
    from sim.model.shapes import ggml_weights
    from sim.run.simulate import fast_simulate
    from validate.peer_calibration import with_peer
    m = load_machine("h200-testbox")
    spec = costs_of(m, "llamacpp")
    w = Workload(batch=1, prompt_tokens=128, new_tokens=1)
    b = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=100 * 2**30, pinned_bytes=100 * 2**30)
    plans = {mapped: llamacpp_ngl(LLAMA6, m, w, b, 3, mapped=mapped) for mapped in (True, False)}

    def ttft(pinned_split, mapped):
        mm = with_peer(m, "llamacpp", spec.model_copy(update={"gpu_offload_split_pinned_s": pinned_split}))
        return fast_simulate(LLAMA6, mm, plans[mapped], w, b)["ttft_s"]
    weights = 4 * ggml_weights("decoder", LLAMA6.family)  # blocks 0-3 on the CPU (-ngl 3: the head and blocks 4-5)
    cpu_blocks = sum(p.compute == "cpu" for p in plans[False].placements if LLAMA6.unit(p.unit).kind == "decoder")
    assert cpu_blocks == 4 and ggml_weights("decoder", LLAMA6.family) == 9
    assert ttft(1e-3, False) - ttft(0.0, False) == pytest.approx(1e-3 * weights, rel=1e-6)
    assert ttft(1e-3, True) == pytest.approx(ttft(0.0, True), rel=1e-12)
    assert ttft(None, False) == pytest.approx(ttft(spec.gpu_offload_split_s, False), rel=1e-12)


@pytest.mark.parametrize("bench, match", [
    (None, "bench: .*is not a regular file"),
    ("{\"n_prompt\": 0}", "bench: record 0 .*'n_gen'"),  # one object: JSON lines of one record
    ("[]", "bench: .*no list of llama-bench records"),
    ("[1, 2]", "bench: record 0 .*is not an object"),
    ("[{\"n_prompt\": 0, \"n_gen\": -4, \"n_gpu_layers\": 0, \"avg_ns\": 1e6}]", "record 0 .*'n_gen'"),
    ("[{\"n_prompt\": 0, \"n_gen\": 4, \"n_gpu_layers\": 0, \"avg_ns\": 0}]", "record 0 .*'avg_ns'"),
    ("[{\"n_prompt\": 0, \"n_gen\": 4, \"n_gpu_layers\": 0, \"avg_ns\": 1e6, \"samples_ns\": [\"x\"]}]",
     "samples_ns that are not positive finite times"),
    ("[{\"n_prompt\": 0, \"n_gen\": true, \"n_gpu_layers\": 0, \"avg_ns\": 1e6}]", "'n_gen'"),
    ("{\"a\": 1}\n{oops", "neither a JSON array nor JSON lines"),
    ("[{\"n_prompt\": 0, \"n_gen\": 4, \"n_gpu_layers\": 99, \"avg_ns\": 1e6}]", "says nothing of this host's CPU"),
    ("[{\"n_prompt\": 0, \"n_gen\": 4, \"n_gpu_layers\": 0, \"avg_ns\": NaN}]", "'avg_ns' .*finite"),
    ("[{\"n_prompt\": 0, \"n_gen\": 4, \"n_gpu_layers\": 0, \"avg_ns\": 1e6, \"samples_ns\": [Infinity]}]",
     "samples_ns .*finite"),
    ("[{\"n_prompt\": 0, \"n_gen\": 4, \"n_gpu_layers\": 0, \"avg_ns\": 1e6, \"n_cpu_moe\": \"3\"}]", "'n_cpu_moe'"),
    ("[{\"n_prompt\": 0, \"n_gen\": 4, \"n_gpu_layers\": 0, \"avg_ns\": 1e6, \"args\": 7}]", "'args'"),
    ("[{\"n_prompt\": 0, \"n_gen\": 0, \"n_gpu_layers\": 0, \"avg_ns\": 1e6}]", "timed nothing"),
    # a -pg test (prompt and generation timed together) is no generation test
    ("[{\"n_prompt\": 512, \"n_gen\": 32, \"n_gpu_layers\": 0, \"avg_ns\": 1e9}]", "no generation test"),
    ("[" * 5000 + "]" * 5000, "neither a JSON array nor JSON lines"),
])
def test_calibrate_peer_refuses_bad_llama_bench_output_in_one_sentence(tmp_path, capsys, bench, match):
    """Every bad llama-bench file is one sentence naming the field and the fix, exit 2, no profile written."""
    import json
    import re
    from offloadsim.cli import main
    from sim.model.resolve import preset_config
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(dict(preset_config("llama-3.1-8b"), num_hidden_layers=2)))
    path = tmp_path / "bench.json"
    if bench is not None:
        path.write_text(bench)
    out = tmp_path / "p.json"
    assert main(["calibrate-peer", str(cfg), "--bench", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_llamacpp_gpu_decode_pays_per_routed_expert_of_each_gpu_block():
    """Every layer on the GPU (-ngl 5 of 4 blocks): each decode step pays gpu_moe_expert_s per routed expert of
    every block (8 experts x 4 blocks = 32 a token, used or not); a prompt step does not; with the experts of the
    first 2 blocks on the CPU (--n-cpu-moe 2) only the GPU's 2 blocks pay."""
    from hwmodels.presets import load_machine
    from sim.plan import Budgets, Workload
    from sim.engines.llamacpp.layout import llamacpp_ngl
    from sim.run.simulate import fast_simulate
    from validate.peer_calibration import with_peer
    m = load_machine("h200-testbox")
    shape = shape_from_config(MOE_CFG)
    b = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=100 * 2**30, pinned_bytes=0)
    w = Workload(batch=1, prompt_tokens=64, new_tokens=9)

    def times(x, n_cpu_moe=0):
        mm = with_peer(m, "llamacpp", costs_of(m, "llamacpp").model_copy(update={"gpu_moe_expert_s": x}))
        s = fast_simulate(shape, mm, llamacpp_ngl(shape, m, w, b, 5, n_cpu_moe), w, b)
        return s["time_per_token_s"], s["ttft_s"]
    (tpot0, _), (tpot1, _) = times(0.0), times(1e-4)
    assert tpot1 - tpot0 == pytest.approx(1e-4 * 8 * 4, rel=1e-6)
    assert times(1e-4, 2)[0] - times(0.0, 2)[0] == pytest.approx(1e-4 * 8 * 2, rel=1e-6)
    prefill = Workload(batch=1, prompt_tokens=64, new_tokens=1)
    mm = [with_peer(m, "llamacpp", costs_of(m, "llamacpp").model_copy(update={"gpu_moe_expert_s": x})) for x in (0, 1e-4)]
    p = llamacpp_ngl(shape, m, prefill, b, 5)
    first = [fast_simulate(shape, x, p, prefill, b)["ttft_s"] for x in mm]
    assert first[1] == pytest.approx(first[0], rel=1e-12)  # the prompt's step: not charged


def test_calibrate_peer_on_a_machine_without_llama_cpp_costs_starts_from_the_measured_engine(tmp_path, capsys):
    """A preset whose llama.cpp costs were never measured (rtx3080-laptop): plan --engine llamacpp says how to
    measure them; calibrate-peer then starts from the costs derived for it from its parts and those measured on
    h200-testbox (its CPU streams 35 GB/s, the laptop's memory), scales their CPU speeds to the records (a host 0.5x
    the H200's 92.37 GB/s: 1.3196x the derived speed), and the plan on the written profile no longer carries the
    note."""
    import json
    from hwmodels.presets import load_machine
    from offloadsim.cli import main
    from sim.model.resolve import preset_config
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(dict(preset_config("llama-3.1-8b"), num_hidden_layers=6)))
    argv = ["plan", str(cfg), "--engine", "llamacpp", "--vram", "2GiB", "--new-tokens", "4"]
    assert main([*argv, "--machine", "rtx3080-laptop"]) == 0
    assert "measure them with offloadsim calibrate-peer" in capsys.readouterr().out
    laptop, h200 = load_machine("rtx3080-laptop"), load_machine("h200-testbox")
    from validate.peer_calibration import with_peer
    recs = _bench_records(LLAMA6, with_peer(laptop, "llamacpp", costs_of(h200, "llamacpp")), 0.5, ngls=(0,))
    bench, out = tmp_path / "bench.json", tmp_path / "laptop.json"
    bench.write_text(json.dumps(recs))
    assert main(["calibrate-peer", str(cfg), "--bench", str(bench), "--profile", "rtx3080-laptop", "--out",
                 str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["host_cpu_scale"] == pytest.approx(0.5 * 92.37 / 35, rel=1e-3) and "h200-testbox preset" in rep["source"]
    got = load_machine(str(out))
    assert got.gpu == laptop.gpu and costs_of(got, "llamacpp").cpu_bytes_per_s == pytest.approx(
        0.5 * costs_of(h200, "llamacpp").cpu_bytes_per_s, rel=1e-3)
    assert main([*argv, "--machine", str(out)]) == 0
    assert "not measured" not in capsys.readouterr().out


def test_llamacpp_head_after_cpu_layers_streams_faster_on_a_dense_model_only():
    """Every layer on the CPU (-ngl 0): a dense model's head streams at cpu_head_bytes_per_s, so doubling it saves
    about half the head's streaming time at the fitted speed (its multiplies overlap the stream in part:
    sim.costs.compute.OVERLAP_NORM); an MoE's head streams at the layers' speed, which the head's speed does not move."""
    from hwmodels.presets import load_machine
    from sim.plan import Budgets, Workload
    from sim.engines.llamacpp.layout import llamacpp_ngl
    from sim.run.simulate import fast_simulate
    from validate.peer_calibration import with_peer
    m = load_machine("h200-testbox")
    spec = costs_of(m, "llamacpp")
    w = Workload(batch=1, prompt_tokens=1, new_tokens=9)
    b = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=100 * 2**30, pinned_bytes=0)
    for shape, moves in ((LLAMA6, True), (shape_from_config(MOE_CFG), False)):
        plan = llamacpp_ngl(shape, m, w, b, 0)
        tpot = [fast_simulate(shape, with_peer(m, "llamacpp", spec.model_copy(
            update={"cpu_head_bytes_per_s": spec.cpu_head_bytes_per_s * k})), plan, w, b)["time_per_token_s"]
            for k in (1, 2)]
        head = next(u.nbytes for u in shape.units if u.kind == "lm_head")
        want = head / spec.cpu_head_bytes_per_s / 2 if moves else 0.0
        assert tpot[0] - tpot[1] == pytest.approx(want, rel=0.05, abs=1e-12)


def test_llamacpp_prompt_step_pays_its_own_split_cost_and_decode_steps_the_fitted_one():
    """-ngl 3 of six blocks, the model file mapped: a 128-token prompt copies the 4 CPU blocks' 36 weight tensors at
    gpu_offload_split_prompt_s each (raising it by X lengthens the first token by 36 X and leaves the decode steps
    alone); 32 sequences decoded together copy them at gpu_offload_split_s, whatever the prompt's cost."""
    from hwmodels.presets import load_machine
    from sim.plan import Budgets, Workload
    from sim.engines.llamacpp.layout import llamacpp_ngl
    from sim.run.simulate import fast_simulate
    from validate.peer_calibration import with_peer
    m = load_machine("h200-testbox")
    spec = costs_of(m, "llamacpp")
    b = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=100 * 2**30, pinned_bytes=0)

    def sim(w, **update):
        mm = with_peer(m, "llamacpp", spec.model_copy(update=update))
        return fast_simulate(LLAMA6, mm, llamacpp_ngl(LLAMA6, m, w, b, 3), w, b)
    w = Workload(batch=1, prompt_tokens=128, new_tokens=5)
    low, high = sim(w, gpu_offload_split_prompt_s=0.0), sim(w, gpu_offload_split_prompt_s=1e-3)
    assert high["ttft_s"] - low["ttft_s"] == pytest.approx(1e-3 * 4 * 9, rel=1e-6)
    assert high["time_per_token_s"] == pytest.approx(low["time_per_token_s"], rel=1e-12)
    many = Workload(batch=32, prompt_tokens=1, new_tokens=5)
    assert sim(many, gpu_offload_split_prompt_s=1e-3)["time_per_token_s"] == pytest.approx(
        sim(many, gpu_offload_split_prompt_s=0.0)["time_per_token_s"], rel=1e-12)
    assert sim(many, gpu_offload_split_s=2e-3)["time_per_token_s"] > sim(many)["time_per_token_s"]


@pytest.mark.parametrize("arch, layers, mib, printed", [
    # llama-fit-params' printed placements at budgets of lab/data/peers/llamacpp-ak.json (its free memory less
    # the margin, -c 160): the Mixtral-like shape's output alone at 2946 MiB (every layer with its experts on the
    # CPU fitted, but fit.cpp's layouts keep the first GPU block whole), then partial layers with the first one's
    # ffn_down (GATE) or ffn_gate and ffn_down (UP) on the CPU; a dense shape's -ngl
    ("moe-8x2", 4, 2946, {"n_layer": 1, "n_part": 0, "overflow": "moe"}),
    ("moe-8x2", 4, 4682, {"n_layer": 5, "n_part": 4, "overflow": "attn"}),
    ("moe-8x2", 4, 6418, {"n_layer": 5, "n_part": 4, "overflow": "gate"}),
    ("moe-8x2", 4, 8154, {"n_layer": 5, "n_part": 3, "overflow": "up"}),
    ("moe-60x4", 8, 5096, {"n_layer": 9, "n_part": 6, "overflow": "gate"}),
    ("qwen3-4b", 20, 2452, {"n_layer": 10, "n_part": 0, "overflow": "moe"}),
])
def test_fit_port_places_what_llama_fit_params_printed(arch, layers, mib, printed):
    from validate.archs import ARCHS
    from hwmodels.presets import load_machine
    from sim.model.formats import parse_format
    from sim.engines.llamacpp.fit import fit_placement
    from validate.checkpoint import make_config
    preset, over = ARCHS[arch]
    shape = shape_from_config(make_config(preset, **dict(over, num_hidden_layers=layers)), parse_format("fp16"))
    w = Workload(batch=1, prompt_tokens=159, new_tokens=1)
    b = Budgets(vram_bytes=mib * 2**20, ram_bytes=100 * 2**30, pinned_bytes=0)
    plan, layout = fit_placement(shape, load_machine("h200-testbox"), w, b)
    assert layout == printed
    t = plan.tiers()
    partial = set(range(shape.n_blocks + 1 - printed["n_part"], shape.n_blocks)) if printed["n_part"] else set()
    assert {u.block for u in shape.units if u.kind == "expert" and t[u.name].compute == "cpu"} == \
        (partial if printed["n_layer"] == shape.n_blocks + 1 else set(range(shape.n_blocks)) if shape.is_moe else set())


def test_fit_step_is_fit_cpps_integer_false_position():
    """delta x (target - low) / (high - low), truncated, clamped to 1..delta-1; negative wraps as uint32 does."""
    from sim.engines.llamacpp.fit import _step
    assert _step(5, 100, 0, 200) == 2          # 500 / 200 = 2.5 -> 2
    assert _step(5, 190, 0, 200) == 4          # 4.75 -> 4, at most delta - 1
    assert _step(5, 10, 0, 200) == 1           # 0.25 -> 0 -> at least 1
    assert _step(5, -1000, 0, 200) == 4        # -25 wraps to 2**32 - 25 -> delta - 1


def test_plan_engine_llamacpp_is_never_slower_than_llamas_own_fit():
    """Mixtral-8x7B at 6 GiB: llama.cpp's --fit keeps the experts of one block on the GPU and the later blocks' on the
    CPU (sim/engines/llamacpp/fit.py), a placement neither -ngl nor --n-cpu-moe makes; `plan --engine llamacpp` takes it
    where it is faster (4 new tokens: the ranking is the request), and is never slower than it at 6 and 12 GiB."""
    from hwmodels.presets import load_machine
    from planner.engines import plan_for_engine
    from sim.model.resolve import load_model
    from sim.run.simulate import fast_simulate
    m = load_machine("h200-testbox")
    shape = load_model("mixtral-8x7b")
    w = Workload(batch=1, prompt_tokens=128, new_tokens=4)
    for gib in (6, 12):
        b = Budgets.of(m, vram=gib * 2**30)
        rep = plan_for_engine("llamacpp", shape, m, w, b)
        fit = fast_simulate(shape, m, POLICIES["llamacpp"](shape, m, w, b), w, b)["time_per_token_s"]
        assert rep.time_per_token_s <= fit * (1 + 1e-9)
        if gib == 6:  # faster than every -ngl N and every -ngl all --n-cpu-moe N placement, tried one by one
            assert "its own --fit" in rep.plan.policy
            families = []
            for ngl, ncmoe in [(k, 0) for k in range(shape.n_blocks + 2)] + [(shape.n_blocks + 1, k)
                                                                             for k in range(shape.n_blocks + 1)]:
                try:
                    plan = llamacpp_ngl(shape, m, w, b, ngl, ncmoe)
                except PlanError:
                    continue
                families.append(fast_simulate(shape, m, plan, w, b)["time_per_token_s"])
            assert families and rep.time_per_token_s < min(families)


def test_module_cleanup_reports_a_failed_interpreter(tmp_path):
    """A config transformers cannot build: the fresh interpreter fails, and the measurement says why, in one line,
    instead of stopping calibrate (the profile then keeps the preset's AirLLM cost); the config file is removed."""
    pytest.importorskip("transformers")
    from sim.engines.airllm.cleanup import module_cleanup
    got = module_cleanup({"model_type": "no-such-architecture"}, tmp_path)
    assert set(got) == {"error"} and "\n" not in got["error"] and got["error"]
    assert not list(tmp_path.iterdir())


def test_llamacpp_cpu_range_scales_its_own_cpu_speed(toy_machine):
    """The test above's llama-cpp decoder l0 on the CPU (4 B at 2 B/s plus 19 ops x 0.01 s, its attention fused:
    2.19 s), l1 and l2 on the GPU grids (0.8 + 0.2 s): 3.19 s. With CPU grids timed in rounds that spread 20%, the
    host factor 1 -+ 0.2 k (k = 1.1222, sim.analysis.interval) applies to llama.cpp's own CPU kernels, not only to the grids
    (which its CPU units do not read): 2.19 x (1 -+ 0.2244) + 1.0."""
    import math

    from sim.analysis.interval import cpu_range
    model = toy_model((4, 8, 2))
    grids = _grids(model, {"l0": ("cpu", 0.8), "l1": ("gpu", 0.8), "l2": ("gpu", 0.2)})
    grids = tuple(g.model_copy(update={"spread": 0.2}) if g.device == "cpu" else g for g in grids)
    machine = toy_machine.model_copy(update={"compute_grids": grids})
    m, plan = _llamacpp_of(model, machine, ["ram_pageable", "vram", "vram"],
                           LlamacppCosts(gpu_dispatch="eager", cpu_bytes_per_s=2.0, cpu_op_s=0.01))
    assert fast_simulate(model, m, plan, W, BIG)["time_per_token_s"] == pytest.approx(3.19)
    k = 1.6448536 * math.sqrt(4 / 3) * math.sqrt(math.pi) / 3
    lo, hi = cpu_range(model, m, plan, W, BIG)["time_per_token_s"]
    assert (lo, hi) == (pytest.approx(2.19 * (1 - 0.2 * k) + 1.0, rel=1e-6), pytest.approx(2.19 * (1 + 0.2 * k) + 1.0,
                                                                                            rel=1e-6))


def test_airllm_loader_wait_hand_worked():
    """A Llama-1B-like decoder (hidden 2048, MLP 8192, 32 heads of 64 over 8 KV heads), 121,643,008 bytes of
    60,821,504 parameters. Attention: 2048 x (2 x 2048 + 2 x 512) = 10,485,760; an MLP matrix (60,821,504 -
    10,485,760) / 3 = 16,778,581.3 parameters, 33,557,162.7 bytes. At 10 GB/s memcpy the loader has 88,085,845.3
    bytes left after the largest tensor: 8.8086 ms, less the 2 ms copy to the GPU it overlaps: 6.8086 ms. A copy
    longer than that leaves no wait; the embedding and the head (one matrix each) never wait."""
    from hwmodels.presets import load_machine
    from sim.model.families import shape_from_config
    from sim.engines.airllm.loader import airllm_loader_wait_s
    cfg = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 1024,
           "torch_dtype": "bfloat16"}
    shape = shape_from_config(cfg)
    m = load_machine("h200-testbox")
    m = m.model_copy(update={"host_memory": m.host_memory.model_copy(update={"memcpy_bytes_per_s": 10e9})})
    dec = next(u for u in shape.units if u.kind == "decoder")
    assert (dec.nbytes, dec.params, dec.kv_bytes_per_token) == (121_643_008, 60_821_504, 2048)
    assert airllm_loader_wait_s(dec, m, 0.002) == pytest.approx((121_643_008 - 2 * 50_335_744 / 3) / 10e9 - 0.002)
    assert airllm_loader_wait_s(dec, m, 0.002) == pytest.approx(6.8086e-3, abs=1e-7)
    assert airllm_loader_wait_s(dec, m, 0.01) == 0.0
    assert all(airllm_loader_wait_s(u, m, 0.0) == 0.0 for u in shape.units if u.kind != "decoder")


def test_airllm_cold_loader_wait_hand_worked():
    """The decoder of test_airllm_loader_wait_hand_worked, its shard not in the page cache (memcpy 10 GB/s, the disk
    2 GB/s): the pin copies fault every byte in, 0.1 + 0.5 ns a byte. The 88,085,845.3 bytes after the MLP matrix
    take 52.8515 ms, less the 2 ms copy: 50.8515 ms; the matrix in flight (33,557,162.7 bytes, 20.1343 ms) ends
    inside a 0.2 s collection, 10.1343 ms past a 10 ms one. Half missed: 0.35 ns a byte, 28.8301 ms. The first module
    of a request waits for its whole read: 121,643,008 / 2 GB/s = 60.8215 ms. The head (one 1024 x 2048 matrix and
    the final norm: 4,198,400 bytes) is the tensor in flight: 2.5190 ms, past a 1 ms collection by 1.5190 ms."""
    from hwmodels.presets import load_machine
    from sim.engines.airllm.loader import airllm_loader_wait_s
    cfg = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 1024,
           "torch_dtype": "bfloat16"}
    shape = shape_from_config(cfg)
    m = load_machine("h200-testbox")
    m = m.model_copy(update={"host_memory": m.host_memory.model_copy(update={"memcpy_bytes_per_s": 10e9}),
                             "storage": m.storage.model_copy(update={"cold_read_bytes_per_s": 2e9})})
    dec = next(u for u in shape.units if u.kind == "decoder")
    head = next(u for u in shape.units if u.kind == "lm_head")
    assert airllm_loader_wait_s(dec, m, 0.002, 1.0, 0.2) == pytest.approx(50.8515e-3, abs=1e-7)
    assert airllm_loader_wait_s(dec, m, 0.002, 1.0, 0.01) == pytest.approx(50.8515e-3 + 10.1343e-3, abs=1e-7)
    assert airllm_loader_wait_s(dec, m, 0.002, 0.5, 0.2) == pytest.approx(28.8301e-3, abs=1e-7)
    assert airllm_loader_wait_s(dec, m, 0.002, 1.0, 0.2, whole=True) == pytest.approx(60.8215e-3, abs=1e-7)
    assert head.nbytes == 4_198_400
    assert airllm_loader_wait_s(head, m, 0.0, 1.0, 0.001) == pytest.approx(1.5190e-3, abs=1e-7)
    assert airllm_loader_wait_s(head, m, 0.0, 1.0, 0.2) == 0.0


def test_airllm_cold_reads_are_waited_for_in_the_first_step():
    """A cold AirLLM run: the first step's loads fault their shards in (the reader lane pays only the page-cache
    part: nothing here, as the shards then stay cached), so its items carry the cold waits of
    airllm_loader_wait_s and the later steps the warm ones; the warm run's waits are the warm ones at every step,
    the later steps of both runs are alike, and the SimPy timeline gives the fast evaluator's times."""
    from hwmodels.presets import load_machine
    from sim.run.items import GPU_LOAD
    from sim.engines.airllm.loader import airllm_loader_wait_s
    cfg = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 3, "vocab_size": 4096,
           "torch_dtype": "bfloat16"}
    shape = shape_from_config(cfg)
    m = load_machine("h200-testbox")
    cleanup = costs_of(m, "airllm").load_unit_s
    w_cold = Workload(batch=1, prompt_tokens=16, new_tokens=3, warm=False)
    plan = POLICIES["airllm"](shape, m, w_cold, BIG)
    cold, warm = (build_schedule(shape, m, plan, w, BIG) for w in (w_cold, w_cold.model_copy(update={"warm": True})))
    assert cold.loader_faults and warm.loader_faults
    loads = [k for k in range(len(cold)) if cold.load[k] == GPU_LOAD and cold.read_bytes[k] > 0]
    first_step = [k for k in loads if cold.step[k] == 0]
    assert len(first_step) == len(shape.units)
    for k in loads:
        u, copy = shape.units[int(cold.unit[k])], float(cold.copy_s[k])
        extra = cold.overhead_s[k] - warm.overhead_s[k]
        if cold.step[k] == 0:
            want = airllm_loader_wait_s(u, m, copy, 1.0, cleanup, whole=k == loads[0]) \
                - airllm_loader_wait_s(u, m, copy, 0.0, cleanup)
            assert extra == pytest.approx(want) and (want > 0 or u.kind != "decoder")
        else:
            assert extra == 0.0
    fast_cold = fast_simulate(shape, m, plan, w_cold, BIG)
    sim_cold = simulate(shape, m, plan, w_cold, BIG)
    assert sim_cold.summary["ttft_s"] == pytest.approx(fast_cold["ttft_s"], rel=1e-9)
    # the faulting is recorded as cold reads on the storage lane, and the GPU's wait for them as waiting on them
    faults = [e for e in sim_cold.events if e.stage == "read" and e.duration_s > 1e-3]
    assert sum(e.duration_s for e in faults) == pytest.approx(float(cold.fault_s.sum()))
    assert all(e.detail == "cold" and e.resource == "storage" and e.token == 0 for e in faults)
    # (the reader lane's own reads cost their request latency, 0.1 ms each here, the first one waited for)
    waited = sim_cold.summary["stall_by_cause_s"]["read_cold"] - float(cold.fault_s.sum())
    assert 0 <= waited <= cold.read_latency_s * len(first_step)
    # the rest of the engine's host cost (cleanups, the loader's pins) is the engine's, not a queue
    assert sim_cold.summary["stall_by_cause_s"]["engine"] == pytest.approx(
        float(cold.overhead_s.sum() - cold.fault_s.sum()))
    assert fast_cold["ttft_s"] > fast_simulate(shape, m, plan, w_cold.model_copy(update={"warm": True}), BIG)["ttft_s"]
    assert fast_cold["page_cache_misses"] == len(first_step)


def test_airllm_does_not_pin_a_module_over_its_limit():
    """airllm 4.0 pins a module's load only up to 2 GiB (`max_pinned_layer_bytes`). A Llama-3.1-405B decoder is
    3,187,703,808 parameters (q and o 16384 x 16384, k and v 16384 x 1024, MLP 3 x 16384 x 53248, two norms),
    6,375,407,616 bytes: no pin copy, no wait for the loader's pins, a pageable copy to the GPU; cold, the main
    thread's copy faults all of it in from disk (6,375,407,616 / 2 GB/s = 3.1877 s). A Llama-1B decoder (121,643,008
    bytes) is pinned as before."""
    from hwmodels.presets import load_machine
    from sim.costs.equations import copy_time_s
    from sim.engines.airllm.loader import AIRLLM_PIN_LIMIT_BYTES, airllm_pins
    shape = shape_from_config(dict(preset_config("llama-3.1-405b"), num_hidden_layers=1))
    m = load_machine("h200-testbox")
    m = m.model_copy(update={"storage": m.storage.model_copy(update={"cold_read_bytes_per_s": 2e9})})
    dec = next(i for i, u in enumerate(shape.units) if u.kind == "decoder")
    assert shape.units[dec].nbytes == 6_375_407_616 > AIRLLM_PIN_LIMIT_BYTES == 2 * 2**30
    assert not airllm_pins(shape.units[dec]) and airllm_pins(UnitShape(
        name="d", kind="decoder", block=0, modules=("d",), matrix_params=0, nbytes=121_643_008, flop_params=0,
        hidden=0, launches=0))
    cold = Workload(batch=1, prompt_tokens=16, new_tokens=2)
    big = Budgets(vram_bytes=m.gpu.vram_bytes, ram_bytes=100 * 2**30, pinned_bytes=50 * 2**30)
    plan = POLICIES["airllm"](shape, m, cold, big)
    assert not plan.pinned_staging
    warm = build_schedule(shape, m, plan, cold.model_copy(update={"warm": True}), big)
    assert warm.unpack_s[dec] == 0.0
    assert warm.copy_s[dec] == pytest.approx(copy_time_s(6_375_407_616, m, pinned=False))
    cleanup = costs_of(m, "airllm").load_unit_s
    assert warm.overhead_s[dec] == pytest.approx(cleanup)
    sch = build_schedule(shape, m, plan, cold, big)
    assert sch.fault_s[dec] == pytest.approx(3.1877, abs=1e-4)
    assert sch.overhead_s[dec] == pytest.approx(cleanup + sch.fault_s[dec])
    assert sch.fault_s[len(shape.units) + dec] == 0.0  # the second step finds it in the page cache


def test_tiers_from_device_map_reads_heads_and_refuses_what_it_cannot_model():
    """transformers' map in lab/data/peers/peers-r.json (GPU 60%): the tied head on the GPU with the embedding while the final norm, which
    the head unit also holds, went to the CPU; the head unit is read from `lm_head`. A map naming a second GPU or
    missing a module is refused in one sentence."""
    from hwmodels.units import InputError
    from sim.engines.accelerate.export import tiers_from_device_map
    dm = {"model.embed_tokens": "0", "lm_head": "0", **{f"model.layers.{i}": "0" for i in range(6)},
          **{f"model.layers.{i}": "cpu" for i in range(6, 16)}, "model.norm": "cpu", "model.rotary_emb": "cpu"}
    t = tiers_from_device_map(TIED, dm)
    assert (t["lm_head"], t["model.layers.5"], t["model.layers.6"]) == ("vram", "vram", "ram_pageable")
    assert set(tiers_from_device_map(TIED, {}, on_gpu=False).values()) == {"ram_pageable"}
    with pytest.raises(InputError, match="'1' of 'lm_head' is not 0, 'cpu' or 'disk'"):
        tiers_from_device_map(TIED, {**dm, "lm_head": "1"})
    with pytest.raises(InputError, match="no key covers module 'model.layers.3'"):
        tiers_from_device_map(TIED, {k: v for k, v in dm.items() if k != "model.layers.3"})


def test_llamacpp_fit_counts_what_the_simulator_prices():
    """features() (the fit's start) against the simulator: raising one cost by d moves a run's time per token by
    its count x d, for every llama.cpp cost the CPU and GPU pay, on LLAMA6 at -ngl 0 and 3, one sequence, four and 64
    (ggml multiplies the CPU's weights on the GPU from 32 tokens a step), with and without ggml-cuda's kernels."""
    from hwmodels.presets import load_machine
    from validate.peer_calibration import features, predict
    m = load_machine("h200-testbox")
    spec = costs_of(m, "llamacpp").model_copy(update={"cpu_op_s": 1e-5})
    params = ("cpu_op_s", "cpu_row_s", "cpu_mm_attention_s", "gpu_op_s", "gpu_mm_attention_s", "gpu_row_s",
              "gpu_multi_row_s")
    d = 1e-6
    for ngl in (0, 3):
        for batch in (1, 4, 64):
            for kernels in (True, False):
                w = Workload(batch=batch, prompt_tokens=4, new_tokens=5)
                plan = llamacpp_ngl(LLAMA6, m, w, Budgets.of(m), ngl)
                run = PeerRun("x", plan, w, Budgets.of(m), 1.0, float("nan"), graphs_warm=True,
                              peer_update={"flash_attention": kernels})
                base = predict(LLAMA6, with_peer(m, "llamacpp", spec), run)["time_per_token_s"]
                for p, n in zip(params, features(LLAMA6, run, params, spec)):
                    moved = with_peer(m, "llamacpp", spec.model_copy(update={p: getattr(spec, p) + d}))
                    assert (predict(LLAMA6, moved, run)["time_per_token_s"] - base) / d == \
                        pytest.approx(n, rel=1e-3, abs=1e-3), (ngl, batch, kernels, p)


