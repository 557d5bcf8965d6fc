"""Several GPUs and the KV cache as a placed object: hand-worked pipelines on the toy machine, the sharing rule,
KV growth, llama.cpp's layer split and Accelerate's balanced map against their own formulas."""
import pytest

from hwmodels.presets import get_machine
from hwmodels.specs import GpuAttach, Topology
from hwmodels.topology import handoff_s, shared_rates, with_gpus
from hwmodels.units import InputError
from sim.costs.kvcache import kv_copy_s
from sim.costs.memory import PlanError, check_plan, device_uses
from sim.engines.accelerate.balanced import balanced_map, balanced_memory
from sim.engines.llamacpp.split import layer_devices
from sim.model.shapes import UnitShape
from sim.plan import Budgets, Plan, Workload
from sim.run.placed import build_placed_schedule
from sim.run.simulate import fast_simulate, simulate
from tests.toys import BIG, toy_model, toy_plan

TWO = Workload(batch=1, prompt_tokens=1, new_tokens=2)


def two_gpus(machine, p2p_s=0.25, **topo):
    """The toy machine with two of its GPU, each on its own 2 B/s link; peer-to-peer copies cost `p2p_s`."""
    a = GpuAttach(gpu=machine.gpu, link=machine.link, shares=topo.pop("shares", ()))
    return machine.model_copy(update={"topology": Topology(gpus=(a, a), p2p_bytes_per_s=1.0, p2p_latency_s=p2p_s,
                                                           **topo)})


def test_two_equal_halves_overlap_each_gpus_first_copy_with_the_other_gpus_work(toy_machine):
    """Four 4-byte layers from pinned RAM, two per GPU; copy c = 4/2 = 2 s, compute k = 4/10 = 0.4 s, hand-off
    h = 0.25 s; one VRAM slot and prefetch 1 per GPU. Hand-worked: step 0 ends at 7.85 s. In a decode step each GPU's
    first layer was copied while the other GPU worked, so each GPU spends h + k + c + k: 2 x 3.05 = 6.1 s per token
    (one GPU with the same slot: 4 x (c + k) = 9.6 s)."""
    m, model = two_gpus(toy_machine), toy_model((4, 4, 4, 4))
    plan = toy_plan(model, "ram_pinned", vram_slots=1, prefetch_depth=1, devices=(0, 0, 1, 1))
    fast = fast_simulate(model, m, plan, TWO, BIG)
    assert fast["ttft_s"] == pytest.approx(7.85)
    assert fast["time_per_token_s"] == pytest.approx(6.1)
    res = simulate(model, m, plan, TWO, BIG)  # the SimPy timeline agrees with the fast evaluator
    assert res.summary["time_per_token_s"] == pytest.approx(6.1)
    one = fast_simulate(model, toy_machine, toy_plan(model, "ram_pinned", vram_slots=1, prefetch_depth=1), TWO, BIG)
    assert one["time_per_token_s"] == pytest.approx(9.6)


def test_a_shared_uplink_splits_its_bandwidth_and_host_memory_caps_the_sum(toy_machine):
    shared = two_gpus(toy_machine, shares=("sw",), shared_bytes_per_s={"sw": 2.0})
    assert shared_rates(shared) == [(1.0, 1.0), (1.0, 1.0)]          # 2 B/s uplink, two GPUs: 1 each
    assert shared_rates(shared, {0}) == [(2.0, 1.0), (2.0, 1.0)]     # alone on it: its own link's 2
    slow_host = two_gpus(toy_machine).model_copy(update={"host_memory": toy_machine.host_memory.model_copy(
        update={"bandwidth_bytes_per_s": 3.0})})
    assert shared_rates(slow_host) == [(1.5, 1.0), (1.5, 1.0)]       # 2 + 2 > 3 B/s: scaled by 3/4
    model = toy_model((4, 4))  # each GPU's layer copies at 1 B/s: 4 s, then computes 0.4 s (no prefetch to overlap)
    plan = toy_plan(model, "ram_pinned", vram_slots=1, prefetch_depth=1, devices=(0, 1))
    assert fast_simulate(model, shared, plan, Workload(prompt_tokens=1, new_tokens=1), BIG)["ttft_s"] == \
        pytest.approx(4 + 0.4 + 0.25 + 0.4)


def test_handoff_goes_peer_to_peer_or_through_host_memory(toy_machine):
    assert handoff_s(two_gpus(toy_machine), 0, 1, 3.0) == pytest.approx(0.25 + 3.0)
    no_p2p = two_gpus(toy_machine).model_copy(update={"topology": Topology(gpus=(GpuAttach(
        gpu=toy_machine.gpu, link=toy_machine.link),) * 2)})
    assert handoff_s(no_p2p, 0, 1, 3.0) == pytest.approx(3.0 / 2 + 3.0 / 2)  # down then up, 2 B/s each, 0 latency
    assert handoff_s(no_p2p, 1, 1, 3.0) == 0.0


def test_one_gpu_machines_keep_their_json_and_gpus_picks_or_copies():
    h200 = get_machine("h200-testbox")
    assert "topology" not in h200.model_dump() and h200.gpu_count == 1
    two = with_gpus(h200, 2)
    assert two.gpu_count == 2 and "topology" in two.model_dump()
    assert with_gpus(get_machine("quad-a100"), 2).topology.shared_bytes_per_s == {"switch0": 25.1e9}
    assert "topology" not in with_gpus(get_machine("h200-x2"), 1).model_dump()
    with pytest.raises(InputError, match="gpus: 3 is more than the 2 GPUs"):
        with_gpus(get_machine("dual-3090"), 3)
    x2 = get_machine("h200-x2")  # the lent machine: the one-GPU preset's values per GPU
    assert x2.gpu == h200.gpu and x2.link == h200.link and x2.gpu_count == 2


def kv_model() -> "toy_model":
    """Two 4-byte layers with 2 KV bytes per token each."""
    m = toy_model((4, 4))
    return m.model_copy(update={"units": tuple(u.model_copy(update={"kv_bytes_per_token": 2}) for u in m.units)})


def test_kv_cache_grows_with_the_request_and_its_copy_with_the_context(toy_machine):
    """Batch 2, prompt 3, 4 new tokens: each layer's cache ends at 2 x 2 x (3 + 4) = 28 bytes. Copied from pinned
    RAM at 2 B/s: the prompt's step writes 2 x 2 x 3 = 12 bytes back (6 s); decode step s reads the cache of
    3 + s - 1 positions, 2 x 2 x (2 + s) bytes, and writes its token's 4 bytes back (2 s)."""
    model, w = kv_model(), Workload(batch=2, prompt_tokens=3, new_tokens=4)
    assert kv_copy_s(model.units[0], 2, 3, 0, 2.0, 0.0) == 6.0
    assert [kv_copy_s(model.units[0], 2, 1, ctx, 2.0, 0.0) for ctx in (3, 4, 5)] == [8.0, 10.0, 12.0]
    vram = device_uses(model, toy_plan(model, "vram", devices=(0, 1)), w, BIG)
    assert [m.kv_bytes for m in vram] == [28, 28]
    placed = toy_plan(model, "vram", devices=(0, 1), kv="pinned", vram_slots=2)
    uses = device_uses(model, placed, w, BIG)
    assert [m.kv_bytes for m in uses] == [2 * 28, 2 * 28]  # the largest layer's cache twice: as copied, as filled
    assert uses[0].pinned_kv_bytes == 56 and uses[0].pinned_bytes >= 56
    sch = build_placed_schedule(model, toy_machine, placed.model_copy(update={"devices": None}), w, BIG)
    before = [float(c) for c, u in zip(sch.overhead_s, sch.unit) if u == 0]
    assert before == [6.0, 8.0, 10.0, 12.0]  # copies on the layer's compute lane, growing with the context


def test_kv_cache_in_ram_frees_vram_and_a_budget_refuses_per_gpu(toy_machine):
    model, w = kv_model(), Workload(batch=2, prompt_tokens=3, new_tokens=4)
    tight = Budgets(vram_bytes=4 + 28 + 100, ram_bytes=10**6, pinned_bytes=10**6)
    with pytest.raises(PlanError, match="vram"):  # both layers on GPU 0: 8 bytes of weights + 56 of cache + ...
        check_plan(model, toy_plan(model, "vram", devices=(0, 0)), w, tight.model_copy(update={"vram_bytes": 60}))
    cpu = toy_plan(model, "vram", devices=(0, 0), kv="cpu")
    assert device_uses(model, cpu, w, tight)[0].kv_bytes == 0
    assert device_uses(model, cpu, w, tight)[0].host_kv_bytes == 56


def test_plan_json_of_one_gpu_has_no_new_keys():
    model = toy_model((4,))
    assert set(toy_plan(model, "vram").model_dump()) == set(Plan.model_fields) - {"devices", "kv"}
    with pytest.raises(ValueError, match="one GPU index per placement"):
        toy_plan(model, "vram", devices=(0, 1))


def test_llamacpp_split_is_upper_bound_over_the_normalised_running_shares():
    """src/llama-model.cpp: splits = running sum of -ts / total; layer il (the output is il = n_layer) goes to
    upper_bound(splits, (il - i_gpu_start) / act_gpu_layers). Worked by hand: n_layer 5, -ngl 6, -ts 3,1: splits
    (0.75, 1); positions il/6 = 0, .17, .33, .5, .67, .83: the first five below 0.75 on GPU 0, the output on GPU 1."""
    assert layer_devices(5, 6, [3, 1]) == [0, 0, 0, 0, 0, 1]
    # a position equal to a split goes past it (upper_bound): 2/4 = 0.5 -> GPU 1
    assert layer_devices(3, 4, [1, 1]) == [0, 0, 1, 1]
    # -ngl 5 of 10 layers: i_gpu_start = 6, positions (il - 6)/5 = 0, .2, .4, .6, .8
    assert layer_devices(10, 5, [1, 1]) == [None] * 6 + [0, 0, 0, 1, 1]
    # Llama-8B's 32 layers and output, even split: il / 33 < 0.5 for il <= 16
    where = layer_devices(32, 33, [1, 1])
    assert where.count(0) == 17 and where.count(1) == 16


def test_accelerate_balanced_caps_every_gpu_but_the_last_and_fills_in_order():
    """Four 4-byte blocks on two GPUs of 20: per_gpu = 16 // 2 + int(1.25 x max(block 4, mean 4)) = 13, the last
    keeps 20. GPU 0, a main device, keeps the largest block still to place (4) free: 4 and 8 fit 13 - 4, 12 does
    not; GPU 1 takes the rest."""
    model = toy_model((4, 4, 4, 4))
    assert balanced_memory(model, [20, 20]) == [13, 20]
    where = balanced_map(model, [20, 20], 100)
    assert [where[u.name] for u in model.units] == [("vram", 0), ("vram", 0), ("vram", 1), ("vram", 1)]


def test_a_plan_for_two_gpus_is_refused_on_one(toy_machine):
    model = toy_model((4, 4))
    plan = toy_plan(model, "ram_pinned", devices=(0, 1))
    with pytest.raises(PlanError, match="give --gpus 2"):
        build_placed_schedule(model, toy_machine, plan, TWO, BIG)


def test_unit_shape_attention_scales_linearly_with_context():
    u = UnitShape(name="l", kind="decoder", block=0, modules=("l",), matrix_params=1, nbytes=2, flop_params=0,
                  hidden=4, launches=1, kv_bytes_per_token=8, attn_flops_per_ctx_token=16)
    assert u.bytes_touched(1, 1, 131071) - u.bytes_touched(1, 1, 0) == 8 * 131071
    assert u.flops(1, 1, 131071) == 16 * (131071 + 1)


def test_whatif_reads_gpu_counts_and_contexts():
    from planner.whatif import context_tokens, parse_vary, variant
    assert [context_tokens(v) for v in ("4k", "32K", "128k", "4096")] == [4096, 32768, 131072, 4096]
    assert parse_vary(["gpus=1,2"]) == {"gpus": ["1", "2"]}
    with pytest.raises(InputError, match="context: '4q'"):
        context_tokens("4q")
    with pytest.raises(InputError, match="gpus: '0'"):
        parse_vary(["gpus=0"])
    m, _ = variant(get_machine("desktop-4090"), {"gpus": "2", "gpu": "rtx3090"})
    assert m.gpu_count == 2 and all(a.gpu.name == "GeForce RTX 3090" for a in m.topology.gpus)


def test_fast_evaluator_equals_the_timeline_over_two_gpus(toy_machine):
    """Seeded mixes of tiers, splits, slots, prefetch depths and KV places on two GPUs sharing an uplink: the fast
    evaluator's compute times are the SimPy timeline's."""
    import numpy as np
    from sim.costs.transfer import Codec
    rng = np.random.default_rng(7)
    m = two_gpus(toy_machine, shares=("sw",), shared_bytes_per_s={"sw": 3.0})
    tiers = ("vram", "ram_pinned", "ram_pageable", "disk_raw", "ram_compressed")
    for _ in range(12):
        model = kv_model() if rng.random() < 0.5 else toy_model(tuple(int(x) for x in rng.integers(2, 9, 5)))
        n = len(model.units)
        cut = int(rng.integers(1, n))
        plan = toy_plan(model, [tiers[int(k)] for k in rng.integers(0, len(tiers), n)],
                        devices=tuple(0 if k < cut else 1 for k in range(n)), vram_slots=int(rng.integers(1, 3)),
                        prefetch_depth=int(rng.integers(0, 3)), codec=Codec(ratio=0.5, unpack_bytes_per_s=4.0),
                        kv=str(rng.choice(["vram", "pinned", "pageable"])))
        w = Workload(batch=int(rng.integers(1, 3)), prompt_tokens=int(rng.integers(1, 4)), new_tokens=3)
        fast = fast_simulate(model, m, plan, w, BIG)
        slow = simulate(model, m, plan, w, BIG).summary
        assert fast["ttft_s"] == pytest.approx(slow["ttft_s"], rel=1e-9)
        assert fast["time_per_token_s"] == pytest.approx(slow["time_per_token_s"], rel=1e-9)
