"""The pipeline's rules (sim/run/pipeline.py), hand-worked on a three-layer toy streamed from RAM."""
import numpy as np

from sim.run.pipeline import rules
from sim.plan import Workload
from sim.run.schedule import build_schedule
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


def test_a_transfer_to_the_gpu_inside_a_compute_waits_for_the_copies_queued_before_it():
    """Prefetch depth 1: item 0 loads (copy 4 s) and computes 1 s; item 1 (an offloaded CPU-held layer) computes 5 s
    and needs the link 1 s in; item 2's load (copy 6 s) opens when item 0's compute starts. Hand-worked: copy 0 in
    [0, 4], item 0 in [4, 5], copy 2 in [4, 10]; item 1 starts at 5, at 6 it waits for copy 2 (queued before it) to
    end at 10, then its remaining 4 s: ends at 14 (10 without the wait); item 2 in [14, 15]. Fast = SimPy."""
    from sim.run.fast import evaluate
    from sim.run.items import GPU_LOAD, Schedule
    from sim.run.timeline import Timeline
    sch = Schedule(names=["a", "b", "c"], unit=[0, 1, 2], step=[0, 0, 0], on_cpu=[False] * 3,
                   load=[GPU_LOAD, 0, GPU_LOAD], read_bytes=[0.0] * 3, unpack_s=[0.0] * 3, copy_s=[4.0, 0.0, 6.0],
                   copy_bytes=[1.0, 0.0, 1.0], compute_s=[1.0, 5.0, 1.0], pinned_slot=[False] * 3,
                   blocking=[False] * 3, overhead_s=[0.0] * 3, gate=[-1] * 3, link_at_s=[-1.0, 1.0, -1.0],
                   n_steps=1).finalize()
    fast = evaluate(sch, 1, True, 3, 1)
    assert list(fast.c_end) == [5.0, 14.0, 15.0]
    ends = {e.unit: e.end_s for e in Timeline(sch, 1, True, 3, 1).run() if e.stage == "compute"}
    assert ends == {"a": 5.0, "b": 14.0, "c": 15.0}
    sch.link_at_s = np.full(3, -1.0)
    assert list(evaluate(sch, 1, True, 3, 1).c_end) == [5.0, 10.0, 11.0]
