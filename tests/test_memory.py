"""Memory accounting: each layer's KV cache sits on the device that computes it (offloadsim's engine keeps a CPU
layer's cache in RAM, validate/stream_run.py), hand-worked on a toy, and the planner's evaluator agrees with it."""
import numpy as np
import pytest

from planner import plan
from planner.evaluator import Evaluator, assignment_of, settings_of
from sim.costs.memory import PlanError, check_plan, memory_use
from sim.plan import Budgets, Placement, Plan, Request, Workload
from sim.model.shapes import ModelShape, UnitShape
from tests.toys import FMT

W = Workload(batch=2, prompt_tokens=3, new_tokens=2)  # 2 x (3 + 2) = 10 token slots of KV per layer


def kv_toy(kv_per_token=(10, 20, 30), nbytes=(4, 8, 2)) -> ModelShape:
    units = tuple(UnitShape(name=f"l{i}", kind="decoder", block=i, modules=(f"l{i}",), matrix_params=nb // 2,
                            nbytes=nb, flop_params=0, hidden=0, launches=0, kv_bytes_per_token=kv)
                  for i, (nb, kv) in enumerate(zip(nbytes, kv_per_token)))
    return ModelShape(name="kvtoy", family="toy", weight_format=FMT, n_blocks=len(units), hidden=0, vocab=0,
                      units=units)


def kv_plan(model, computes, tiers, **kw) -> Plan:
    placements = tuple(Placement(unit=u.name, tier=t, compute=c) for u, t, c in zip(model.units, tiers, computes))
    return Plan(model=model.name, machine="toy", placements=placements, **kw)


MODEL = kv_toy()
MIXED = kv_plan(MODEL, ["gpu", "cpu", "gpu"], ["vram", "ram_pageable", "ram_pageable"], pinned_staging=False)


def test_a_cpu_layers_kv_cache_is_in_ram_not_vram():
    """Layers of 10, 20 and 30 KV bytes a token, 10 token slots each: 100, 200 and 300 bytes. l1 computed on the
    CPU: VRAM holds 100 + 300 = 400, RAM 200, and the page cache is 200 smaller than with every layer on the GPU."""
    b = Budgets(vram_bytes=10**6, ram_bytes=1000, pinned_bytes=1000)
    m = memory_use(MODEL, MIXED, W, b)
    assert (m.kv_bytes, m.host_kv_bytes) == (400, 200)
    all_gpu = memory_use(MODEL, MIXED.model_copy(update={"placements": tuple(
        p.model_copy(update={"compute": "gpu"}) for p in MIXED.placements)}), W, b)
    assert (all_gpu.kv_bytes, all_gpu.host_kv_bytes) == (600, 0)
    assert all_gpu.page_cache_bytes - m.page_cache_bytes == 200
    assert m.page_cache_bytes == 1000 - (8 + 2) - 200  # RAM less the pageable weights (l1, l2) and l1's cache


def test_a_prompt_offloaded_to_the_gpu_copies_one_cpu_layers_cache_there():
    """With gpu_offload_min_tokens <= 2 x 3 prompt tokens the engine multiplies l1 on the GPU for the prompt, its
    cache copied there meanwhile: VRAM 400 + 200; above 6 tokens no copy."""
    b = Budgets(vram_bytes=10**6, ram_bytes=1000, pinned_bytes=1000)
    on = memory_use(MODEL, MIXED.model_copy(update={"gpu_offload_min_tokens": 6}), W, b)
    off = memory_use(MODEL, MIXED.model_copy(update={"gpu_offload_min_tokens": 7}), W, b)
    assert (on.kv_bytes, off.kv_bytes) == (600, 400)
    # the copy passes through a pinned host buffer of one of its K, V: 100 bytes of RAM beside l1's own 200
    assert (on.host_kv_bytes, off.host_kv_bytes) == (300, 200)


def test_an_offloaded_cpu_layer_moves_its_cache_through_the_pinned_buffer(toy_machine):
    """l1 (20 KV bytes a token) on the CPU, its prompt (2 x 3 tokens) multiplied on the GPU: the prompt's 120 bytes
    come back as K then V, 60 bytes each, a pinned copy (60 B/s) and a host copy (half the CPU's 60 B/s of memory
    bandwidth: it reads and writes): 2 x (1 + 2) = 6 s on top of the GPU's compute. The decode steps (2 tokens,
    below the threshold) stay on the CPU and move nothing."""
    from sim.run.schedule import build_schedule
    link = toy_machine.link.model_copy(update={"pinned_h2d_bytes_per_s": 60.0, "by_size": (), "latency_s": 0.0})
    m = toy_machine.model_copy(update={"link": link, "cpu": toy_machine.cpu.model_copy(
        update={"memory_bytes_per_s": 60.0})})
    b = Budgets(vram_bytes=10**6, ram_bytes=10**6, pinned_bytes=10**6)
    off = build_schedule(MODEL, m, MIXED.model_copy(update={"gpu_offload_min_tokens": 6}), W, b)
    gpu = build_schedule(MODEL, m, kv_plan(MODEL, ["gpu"] * 3, ["vram", "ram_pageable", "ram_pageable"],
                                           pinned_staging=False), W, b)
    cpu = build_schedule(MODEL, m, MIXED, W, b)
    l1 = (off.unit == 1) & (off.step == 0)
    assert off.compute_s[l1][0] == pytest.approx(gpu.compute_s[l1][0] + 6.0)
    assert not off.on_cpu[l1][0]
    decode = (off.unit == 1) & (off.step == 1)
    assert off.on_cpu[decode][0] and off.compute_s[decode][0] == cpu.compute_s[decode][0]


def test_the_engine_moves_only_the_span_through_its_buffer():
    """validate.devices.move_kv copies positions [2, 4) of K and V through the engine's staging buffer (one tensor's
    span at a time, so a buffer of one of them serves) and leaves every other position as it was."""
    torch = pytest.importorskip("torch")
    from validate.devices import move_kv
    k, v = torch.arange(48.).view(1, 2, 6, 4), -torch.arange(48.).view(1, 2, 6, 4)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    move_kv(torch.empty(2 * 2 * 4 * 4, dtype=torch.uint8), (k, v), (dk, dv), slice(2, 4))
    assert torch.equal(dk[:, :, 2:4], k[:, :, 2:4]) and torch.equal(dv[:, :, 2:4], v[:, :, 2:4])
    assert not dk[:, :, :2].any() and not dk[:, :, 4:].any() and not dv[:, :, 4:].any()


def test_ram_short_of_a_cpu_layers_cache_is_refused_in_one_sentence():
    """The pageable weights (10 bytes) and l1's cache (200) need 210 bytes of RAM: 209 is refused, 210 fits."""
    check_plan(MODEL, MIXED, W, Budgets(vram_bytes=10**6, ram_bytes=210, pinned_bytes=0))
    with pytest.raises(PlanError) as e:
        check_plan(MODEL, MIXED, W, Budgets(vram_bytes=10**6, ram_bytes=209, pinned_bytes=0))
    msg = str(e.value)
    assert msg.startswith("ram:") and "KV cache of its CPU layers" in msg and "\n" not in msg


def test_evaluator_memory_is_memory_use(toy_machine):
    """The planner's evaluator counts the same bytes, field by field, with and without the prompt's offload."""
    b = Budgets(vram_bytes=10**6, ram_bytes=1000, pinned_bytes=1000)
    for off in (None, 6):
        p = MIXED.model_copy(update={"gpu_offload_min_tokens": off})
        got = Evaluator(Request(MODEL, toy_machine, W, b), None).memory(assignment_of(p), settings_of(p))
        assert got == memory_use(MODEL, p, W, b)


def test_planner_uses_the_vram_a_cpu_layers_cache_leaves(toy_machine):
    """Every layer's cache on the GPU needs 600 bytes beside the weights: a 450-byte VRAM budget cannot hold it,
    but computing l2 (its 300-byte cache) on the CPU fits. The planner finds such a plan, within budget."""
    machine = toy_machine.model_copy(update={"gpu": toy_machine.gpu.model_copy(update={"vram_bytes": 10**6})})
    b = Budgets(vram_bytes=450, ram_bytes=machine.host_memory.capacity_bytes, pinned_bytes=0)
    p = plan(MODEL, machine, W, b, time_budget_s=5.0)
    assert p.feasible
    m = check_plan(MODEL, p, W, b)
    assert m.kv_bytes <= 450 - m.resident_vram_bytes - m.staging_vram_bytes - m.activation_bytes
    assert m.host_kv_bytes >= 600 - 450  # at least that much of the cache had to leave the GPU
    assert np.any([q.compute == "cpu" for q in p.placements])


@pytest.mark.parametrize("arch, elements", [("qwen3-8b", 67_584), ("phi3-mini", 46_080)])
def test_a_decoders_live_activations_hand_worked(arch, elements):
    """Qwen3-8B's layer (hidden 4096, 32 heads of 128 over 8: q 4096, kv 1024, MLP 12288): 3 x 4096 + 2 x 4096 +
    2 x 1024 + 2 x 4096 (keys and values repeated to 32 heads) + 3 x 12288 = 67,584 elements a prompt token.
    Phi-3-mini's (hidden 3072, 32 heads of 96, no grouped KV: q = kv = 3072, MLP 8192): 9216 + 6144 + 6144 + 24576 =
    46,080. The prompt's activations: 2 bytes each, + 8 bytes of token id, + the FP32 logits of the last tokens."""
    from validate.archs import ARCHS
    from sim.model.families import shape_from_config
    from sim.costs.memory import activation_bytes, decoder_live_elements
    from sim.model.resolve import preset_config
    preset, over = ARCHS[arch]
    shape = shape_from_config({**preset_config(preset), **over})
    dec = next(u for u in shape.units if u.kind == "decoder")
    assert decoder_live_elements(dec) == elements
    w = Workload(batch=4, prompt_tokens=512, new_tokens=2)
    assert activation_bytes(shape, w) == 4 * 512 * (2 * elements + 8) + 4 * 4 * shape.vocab


def toy_store(tmp_path, vocab: int):
    """A 2-layer Llama-shaped random checkpoint of `vocab` tokens and its layer store: (config, shape)."""
    from sim.model.resolve import load_model
    from validate.checkpoint import make_checkpoint, make_config
    from validate.store import build_store
    cfg = make_config("llama-3.1-8b", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=vocab)
    cfg.pop("rope_scaling", None)
    make_checkpoint(cfg, tmp_path / "ckpt", device="cpu")
    shape = load_model(str(tmp_path / "ckpt"))
    build_store(tmp_path / "ckpt", shape, tmp_path / "store", compress=False, threads=1)
    return cfg, shape


def test_engine_stages_only_what_streams(tmp_path):
    """offloadsim's engine takes VRAM staging slots for the units that pass through them, as sim.costs.memory counts
    them: none for a plan that computes every non-resident layer on the CPU, and, for a plan that multiplies them
    on the GPU for a big prompt, slots of the largest once a run's prompt reaches the threshold."""
    torch = pytest.importorskip("torch")
    from sim.engines.common import make_plan
    from tests.conftest import TOY
    from validate.engine import Engine
    cfg, shape = toy_store(tmp_path, 128)
    dec = [u.name for u in shape.units if u.kind == "decoder"]
    tiers = {u.name: "ram_pageable" if u.name in dec else "vram" for u in shape.units}
    plan = make_plan(shape, TOY, "t", tiers, {n: "cpu" for n in dec}, vram_slots=2, gpu_offload_min_tokens=8)
    e = Engine(tmp_path / "store", cfg, shape, plan, TOY, device="cpu")
    assert e.vram_slots == []
    e.run(Workload(batch=1, prompt_tokens=4, new_tokens=2))  # below the threshold: the CPU computes them
    assert e.vram_slots == []
    e.run(Workload(batch=2, prompt_tokens=4, new_tokens=2))  # 8 tokens: multiplied on the GPU, staged
    largest = max(u.nbytes for u in shape.units if u.name in dec)
    assert [b.numel() for b in e.vram_slots] == [largest, largest]
    assert torch.is_tensor(e.vram_slots[0])


def test_a_cpu_embedding_is_looked_up_in_place_never_staged(tmp_path):
    """Embedding and decoders on the CPU (llama.cpp's placement), the prompt multiplied on the GPU: the embedding's
    rows are looked up in place, never the table staged, so the slots are the decoders' (a table larger than the
    slots once overflowed them: a crash on the H200, lab/data/validation/matrix/matrix-p.json), and the simulator lays out no copy of it either."""
    pytest.importorskip("torch")
    from sim.engines.common import make_plan
    from sim.run.schedule import build_schedule
    from tests.conftest import TOY
    from validate.engine import Engine
    cfg, shape = toy_store(tmp_path, 2048)
    cpu = [u.name for u in shape.units if u.kind in ("embedding", "decoder")]
    largest = max(u.nbytes for u in shape.units if u.kind == "decoder")
    assert next(u.nbytes for u in shape.units if u.kind == "embedding") > largest
    plan = make_plan(shape, TOY, "t", {u.name: "ram_pageable" if u.name in cpu else "vram" for u in shape.units},
                     {n: "cpu" for n in cpu}, vram_slots=2, gpu_offload_min_tokens=8)
    w = Workload(batch=2, prompt_tokens=4, new_tokens=2)
    sch = build_schedule(shape, TOY, plan, w, Budgets(vram_bytes=10**9, ram_bytes=10**9, pinned_bytes=10**9))
    assert sch.on_cpu[0] and not sch.load[0] and not sch.on_cpu[1]  # embedding on the CPU, decoder 0 offloaded
    e = Engine(tmp_path / "store", cfg, shape, plan, TOY, device="cpu")
    run = e.run(w)
    assert [b.numel() for b in e.vram_slots] == [largest, largest]
    assert not [ev for ev in run.events if ev.unit == cpu[0] and ev.stage == "copy"]


def test_a_tied_head_resident_beside_its_embedding_is_one_matrix(toy_machine):
    """A head tied to the embedding holds no bytes of its own on the GPU while the embedding is there too: everything
    resident is the model's stored bytes; the head streamed alone is its own copy, staged whole. The evaluator counts
    the same."""
    from sim.model.families import shape_from_config
    from sim.model.resolve import preset_config
    from sim.engines.common import make_plan
    cfg = dict(preset_config("llama-3.1-8b"), num_hidden_layers=2, hidden_size=256, intermediate_size=512,
               num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=4096, tie_word_embeddings=True)
    cfg.pop("rope_scaling", None)
    model = shape_from_config(cfg)
    head = next(u for u in model.units if u.kind == "lm_head")
    emb = next(u for u in model.units if u.kind == "embedding")
    assert head.tied_nbytes == emb.nbytes == 4096 * 256 * 2
    b = Budgets(vram_bytes=10**9, ram_bytes=10**9, pinned_bytes=10**9)
    resident = make_plan(model, toy_machine, "t", {u.name: "vram" for u in model.units})
    assert memory_use(model, resident, W, b).resident_vram_bytes == model.total_bytes
    head_streamed = make_plan(model, toy_machine, "t", {u.name: "ram_pageable" if u is head else "vram"
                                                        for u in model.units})
    # the embedding stays; the head (its norm and its copy of the matrix) streams
    m = memory_use(model, head_streamed, W, b)
    assert m.resident_vram_bytes == model.total_bytes - (head.nbytes - head.tied_nbytes) and m.slot_bytes == head.nbytes
    for p in (resident, head_streamed):
        assert Evaluator(Request(model, toy_machine, W, b), None).memory(assignment_of(p), settings_of(p)) == \
            memory_use(model, p, W, b)


def test_a_shape_copied_with_other_units_looks_up_its_own():
    """ModelShape caches its name index and tensors per shard; a copy with other units must not keep the original's
    (pydantic copies cached values as they were). Doubling every unit's bytes halves the tensors per 4 GiB shard."""
    from sim.model.families import shape_from_config
    from sim.model.resolve import preset_config
    model = shape_from_config(dict(preset_config("llama-3.1-8b"), num_hidden_layers=2))
    before, per_shard = model.unit("lm_head").nbytes, model.tensors_per_shard   # both read, so both cached
    copy = model.model_copy(update={"units": tuple(u.model_copy(update={"nbytes": 2 * u.nbytes}) for u in model.units)})
    assert copy.unit("lm_head").nbytes == 2 * before and model.unit("lm_head").nbytes == before
    assert copy.tensors_per_shard == per_shard / 2
