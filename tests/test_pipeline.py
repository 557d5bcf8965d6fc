"""The pipeline's rules (sim/pipeline.py), hand-worked on a three-layer toy streamed from RAM."""
import numpy as np

from sim.pipeline import rules
from sim.plan import Workload
from sim.schedule import build_schedule
from tests.toys import BIG, toy_model, toy_plan

TWO = Workload(batch=1, prompt_tokens=1, new_tokens=2)


def test_window_slots_and_blocking(toy_machine):
    m = toy_model()   # items: l0 l1 l2 (step 0), l0 l1 l2 (step 1)
    sch = build_schedule(m, toy_machine, toy_plan(m, ["vram", "ram_pinned", "ram_pageable"]), TWO, BIG)
    r = rules(sch, prefetch_depth=1, overlap_copy=True, vram_slots=2, pinned_slots=2)
    assert r.loads.tolist() == [1, 2, 4, 5]
    assert r.window.tolist() == [-1, -1, 1, -1, 2, 4]      # each load opens when the load before it starts computing
    assert r.after.tolist() == [-1] * 6
    assert r.vram_from.tolist() == [-1, -1, -1, -1, 1, 2]  # two VRAM slots, reused in turn
    assert r.blocking.tolist() == [False, False, True, False, False, True]  # pageable copies wait for compute
    r0 = rules(sch, prefetch_depth=0, overlap_copy=False, vram_slots=1, pinned_slots=1)
    assert r0.after.tolist() == [-1, 0, 1, -1, 3, 4] and (r0.window == -1).all()
    assert r0.blocking.tolist() == [False, True, True, False, True, True]  # blocking copies: every GPU load


def test_pinned_staging_slots_round_robin(toy_machine):
    m = toy_model()
    sch = build_schedule(m, toy_machine, toy_plan(m, "disk_raw", pinned_slots=2), TWO, BIG)
    r = rules(sch, prefetch_depth=2, overlap_copy=True, vram_slots=3, pinned_slots=2)
    assert np.flatnonzero(sch.pinned_slot).tolist() == [0, 1, 2, 3, 4, 5]
    assert r.pin_from.tolist() == [-1, -1, 0, 1, 2, 3]
