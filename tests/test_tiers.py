"""The tier table: each row's facts by hand, eq. (1) per tier on the toy machine, the schedule's load columns as the
rows give them, and the planner's evaluator counting memory as sim.costs.memory does, over many plans."""
import pytest
from hypothesis import given, settings, strategies as st

from planner.choices import OPTIONS
from planner.evaluator import Evaluator, assignment_of, settings_of
from sim.costs.equations import t_prep
from sim.costs.memory import memory_use
from sim.costs.tiers import STAGED_TIERS, TIER_ROWS, TIERS, load_row, tier_row
from sim.costs.transfer import Codec
from sim.plan import Budgets, Placement, Plan, Request, Workload
from sim.run.items import CPU_READ, GPU_LOAD
from sim.run.schedule import build_schedule
from hwmodels.units import InputError
from tests.conftest import TOY
from tests.toys import toy_model

# tier: (home, compressed, staged, cpu computable, resident, reads storage, in RAM, copy reads)
FACTS = {
    "vram": ("vram", False, False, False, True, False, False, None),
    "ram_pinned": ("pinned", False, False, True, False, False, True, "pinned"),
    "ram_pageable": ("pageable", False, False, True, False, False, True, "pageable"),
    "ram_compressed": ("pageable", True, True, False, False, False, True, "staging"),
    "disk_raw": ("storage", False, True, True, False, True, False, "staging"),
    "disk_compressed": ("storage", True, True, False, False, True, False, "staging"),
}


def test_every_tier_has_one_row_with_its_facts():
    assert TIERS == tuple(FACTS)
    for tier, facts in FACTS.items():
        r = tier_row(tier)
        assert (r.home, r.compressed, r.staged, r.cpu_computable, r.resident, r.reads_storage, r.in_ram,
                r.copy_from) == facts, tier
    assert STAGED_TIERS == ("ram_compressed", "disk_raw", "disk_compressed")


def test_which_host_memory_a_copy_reads():
    """Pinned RAM always copies pinned; a staged tier only when the plan stages; pageable RAM never."""
    assert [TIER_ROWS[t].copies_pinned(True) for t in TIERS[1:]] == [True, False, True, True, True]
    assert [TIER_ROWS[t].copies_pinned(False) for t in TIERS[1:]] == [True, False, False, False, False]
    assert [TIER_ROWS[t].cpu_memory for t in TIERS] == ["pageable", "pinned"] + ["pageable"] * 4
    assert [t for t in TIERS if TIER_ROWS[t].packed_reads] == ["disk_compressed"]


def test_a_stored_size_is_the_codecs_ratio_of_a_compressed_tier_only():
    assert [TIER_ROWS[t].stored(8, 0.5) for t in TIERS] == [8, 8, 8, 4.0, 8, 4.0]


def test_an_unknown_tier_is_refused_in_one_sentence():
    with pytest.raises(InputError, match=r"^tier: unknown tier 'ssd'; use one of vram, ram_pinned"):
        tier_row("ssd")


# 8 bytes on the toy: cold read 1 B/s, cached 4 B/s, link 2 B/s pinned and 1 B/s pageable; codec halves the bytes
# and unpacks 4 B/s
HAND = {"vram": (0, 0, 0), "ram_pinned": (0, 0, 4.0), "ram_pageable": (0, 0, 8.0), "ram_compressed": (0, 2.0, 4.0),
        "disk_raw": (8.0, 0, 4.0), "disk_compressed": (4.0, 2.0, 4.0)}


@pytest.mark.parametrize("tier", TIERS)
def test_eq1_for_every_tier_on_the_toy(tier):
    codec = Codec(ratio=0.5, unpack_bytes_per_s=4.0)
    assert tuple(t_prep(8, tier, TOY, codec=codec)) == HAND[tier]
    read, unpack, copy = HAND[tier]
    # warm reads at 4 B/s; host buffers not pinned: every copy at the pageable 1 B/s
    assert tuple(t_prep(8, tier, TOY, codec=codec, warm=True)) == (read / 4, unpack, copy)
    assert tuple(t_prep(8, tier, TOY, codec=codec, pinned=False)) == (read, unpack, 8.0 if copy else 0)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("compute", ["gpu", "cpu"])
@pytest.mark.parametrize("staging", [True, False])
def test_load_row_is_the_schedules_load_columns(tier, compute, staging):
    """What sim.run.schedule lays out for a unit of each tier, device and staging is load_row's row."""
    if compute == "cpu" and not TIER_ROWS[tier].cpu_computable:
        return
    model = toy_model((8,))
    codec = Codec(ratio=0.5, unpack_bytes_per_s=4.0)
    plan = Plan(model="toy", machine="toy", placements=(Placement(unit="l0", tier=tier, compute=compute),),
                codec=codec, pinned_staging=staging)
    sch = build_schedule(model, TOY, plan, Workload(prompt_tokens=1, new_tokens=1), Budgets.unlimited())
    r = load_row(TIER_ROWS[tier], 8, compute == "cpu", codec, TOY, staging)
    load = GPU_LOAD if r.gpu_load else CPU_READ if r.cpu_read else 0
    assert (int(sch.load[0]), float(sch.read_bytes[0]), float(sch.unpack_s[0]), float(sch.copy_s[0]),
            bool(sch.pinned_slot[0])) == (load, r.read_nbytes, r.unpack_s, r.copy_s, r.gpu_load and r.staged)
    # by hand: a GPU use reads 8 raw or 4 stored bytes from disk, unpacks 8 at 4 B/s, copies 8 at 2 or 1 B/s
    if r.gpu_load:
        assert r.read_nbytes == (HAND[tier][0] and (4.0 if TIER_ROWS[tier].compressed else 8.0))
        assert r.copy_s == (4.0 if r.pinned else 8.0)


def _plan(model, tiers, computes, s, codec) -> Plan:
    placements = tuple(Placement(unit=u.name, tier=t, compute=c) for u, t, c in zip(model.units, tiers, computes))
    return Plan(model=model.name, machine="toy", placements=placements, prefetch_depth=s[0], vram_slots=s[1],
                pinned_slots=s[2], gpu_offload_min_tokens=s[3], codec=codec)


MODEL = toy_model((4, 8, 2, 6))
KV_MODEL = MODEL.model_copy(update={"units": tuple(u.model_copy(update={"kv_bytes_per_token": 3 * i + 1})
                                                   for i, u in enumerate(MODEL.units))})


@settings(max_examples=60, deadline=None)
@given(options=st.lists(st.sampled_from(OPTIONS), min_size=4, max_size=4),
       loader=st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(0, 3), st.sampled_from([None, 1, 3, 50])),
       ram=st.integers(0, 200), codec=st.sampled_from([None, Codec(ratio=0.3, unpack_bytes_per_s=4.0)]))
def test_the_evaluator_counts_memory_as_memory_use(options, loader, ram, codec):
    """Any placement and loader settings: the evaluator's accounting is memory_use's, field by field, or None exactly
    when a budget is exceeded (or a compressed tier has no codec)."""
    w = Workload(batch=1, prompt_tokens=2, new_tokens=2)
    b = Budgets(vram_bytes=150, ram_bytes=ram, pinned_bytes=20)
    ev = Evaluator(Request(KV_MODEL, TOY, w, b), codec)
    p = _plan(KV_MODEL, *zip(*options), loader, codec)
    got = ev.memory(assignment_of(p), settings_of(p))
    if codec is None and any(TIER_ROWS[t].compressed for t, _ in options):
        assert got is None
        return
    want = memory_use(KV_MODEL, p, w, b)
    fits = want.vram_bytes <= b.vram_bytes and want.pinned_bytes <= b.pinned_bytes and \
        want.ram_weights_bytes + want.pinned_bytes + want.host_kv_bytes <= b.ram_bytes
    assert got == (want if fits else None)


def test_a_tied_head_in_ram_beside_its_embedding_is_counted_once(toy_machine):
    """A head tied to the embedding, both in pageable RAM, holds their one matrix there once: in memory_use and in
    the evaluator alike."""
    from sim.model.families import shape_from_config
    from sim.model.resolve import preset_config
    cfg = dict(preset_config("llama-3.1-8b"), num_hidden_layers=2, hidden_size=256, intermediate_size=512,
               num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=4096, tie_word_embeddings=True)
    cfg.pop("rope_scaling", None)
    model = shape_from_config(cfg)
    w, b = Workload(prompt_tokens=2, new_tokens=2), Budgets(vram_bytes=10**9, ram_bytes=10**9, pinned_bytes=10**9)
    tiers = ["ram_pageable" if u.kind in ("embedding", "lm_head") else "vram" for u in model.units]
    p = _plan(model, tiers, ["gpu"] * len(tiers), (1, 2, 2, None), None)
    tied = next(u for u in model.units if u.kind == "lm_head").tied_nbytes
    m = memory_use(model, p, w, b)
    assert m.ram_weights_bytes == sum(u.nbytes for u in model.units if u.kind in ("embedding", "lm_head")) - tied
    assert Evaluator(Request(model, toy_machine, w, b), None).memory(assignment_of(p), settings_of(p)) == m
