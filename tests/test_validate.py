"""The validation loop on the CPU: a tiny random checkpoint, calibrate --quick, plan, validate; bit-exact outputs
for every storage tier; the store's compressed round trip is bit-exact; and the engine agrees with transformers."""
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from offloadsim.cli import main  # noqa: E402
from hwmodels import get_machine  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402
from sim.plan import Budgets, Placement, Plan, Workload  # noqa: E402
from sim.engines.placements import POLICIES  # noqa: E402

TINY = ["--layers", "3", "--hidden", "128", "--intermediate", "256", "--heads", "4", "--kv-heads", "2", "--vocab", "512"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ck") / "tiny"
    assert main(["make-checkpoint", "--preset", "qwen3-14b", *TINY, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def store(ckpt) -> Path:
    from validate.store import build_store
    out = ckpt.parent / "store"
    build_store(ckpt, load_model(str(ckpt)), out, threads=2)
    return out


def test_store_round_trip_is_bit_exact(ckpt, store):
    from concurrent.futures import ThreadPoolExecutor
    from validate.store import decompress_into, file_meta, read_bytes, read_into, unit_tensors, views
    shape = load_model(str(ckpt))
    truth = unit_tensors(ckpt, shape)
    index = json.loads((store / "store.json").read_text())["units"]
    with ThreadPoolExecutor(3) as pool:
        for name, e in index.items():
            raw = file_meta(store / e["raw"])
            buf = torch.empty(raw["nbytes"], dtype=torch.uint8)
            read_into(store / e["raw"], raw, buf)
            z = file_meta(store / e["zst"])
            dec = torch.empty(z["nbytes"], dtype=torch.uint8)
            decompress_into(read_bytes(store / e["zst"], z), z, dec, pool)
            assert z["stored"] < z["nbytes"]  # it does compress
            for key, t in truth[name].items():
                assert torch.equal(views(buf, raw["layout"])[key].view(torch.uint8), t.view(torch.uint8))
                assert torch.equal(views(dec, z["layout"])[key].view(torch.uint8), t.view(torch.uint8))


def test_engine_matches_transformers(ckpt, store):
    from transformers import AutoModelForCausalLM
    from hwmodels import get_machine
    from validate.engine import Engine
    shape, machine = load_model(str(ckpt)), get_machine("rtx3080-laptop")
    w = Workload(prompt_tokens=6, new_tokens=3)
    plan = POLICIES["resident"](shape, machine, w, Budgets(vram_bytes=2**40, ram_bytes=2**40, pinned_bytes=2**40))
    run = Engine(store, json.loads((ckpt / "config.json").read_text()), shape, plan, machine, "cpu").run(w)
    hf = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16)
    prompt = torch.randint(0, shape.vocab, (1, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = hf(prompt).logits[:, -1].float()
    # same model, different kernels and op order: close, not equal (bf16 rounding)
    assert torch.nn.functional.cosine_similarity(run.logits[0], ref).item() > 0.999
    assert (run.logits[0] - ref).abs().max().item() < 0.05


def test_every_tier_is_bit_exact(ckpt, store):
    from hwmodels import get_machine
    from sim.costs.equations import machine_codec
    from validate.engine import Engine
    shape, machine = load_model(str(ckpt)), get_machine("rtx3080-laptop")
    w = Workload(prompt_tokens=5, new_tokens=4)
    cfg = json.loads((ckpt / "config.json").read_text())
    big = Budgets(vram_bytes=2**40, ram_bytes=2**40, pinned_bytes=2**40)
    ref = Engine(store, cfg, shape, POLICIES["resident"](shape, machine, w, big), machine, "cpu").run(w)
    tiers = ["disk_compressed", "ram_pinned", "ram_compressed", "disk_raw", "ram_pageable"]
    placements = tuple(Placement(unit=u.name, tier=tiers[k % len(tiers)], compute="cpu" if k == 3 else "gpu")
                       for k, u in enumerate(shape.units))
    plan = Plan(model=shape.name, machine=machine.name, placements=placements, prefetch_depth=2, vram_slots=2,
                pinned_slots=2, codec=machine_codec(machine))
    run = Engine(store, cfg, shape, plan, machine, "cpu").run(w, cold=True)
    assert torch.equal(run.tokens, ref.tokens)
    assert all(torch.equal(a, b) for a, b in zip(run.logits, ref.logits))
    stages = {e.stage for e in run.events}
    assert {"read", "unpack", "copy", "compute"} <= stages


def test_two_fake_devices_and_a_kv_cache_in_ram_are_bit_exact(ckpt, store, kv="pinned"):
    """A layer split over two devices (both the CPU here: the per-GPU slots, copiers, step tensors and hand-offs
    run), with the KV cache in RAM copied around each layer: the same tokens and logits as all resident."""
    from validate.engine import Engine
    shape, machine = load_model(str(ckpt)), get_machine("rtx3080-laptop")
    w = Workload(prompt_tokens=5, new_tokens=4)
    cfg = json.loads((ckpt / "config.json").read_text())
    big = Budgets(vram_bytes=2**40, ram_bytes=2**40, pinned_bytes=2**40)
    ref = Engine(store, cfg, shape, POLICIES["resident"](shape, machine, w, big), machine, "cpu").run(w)
    tiers = ["vram", "ram_pinned", "vram", "ram_pinned", "ram_pageable"]
    placements = tuple(Placement(unit=u.name, tier=tiers[k % len(tiers)]) for k, u in enumerate(shape.units))
    plan = Plan(model=shape.name, machine=machine.name, placements=placements, prefetch_depth=1, vram_slots=1,
                devices=tuple(0 if k < 2 else 1 for k in range(len(placements))), kv=kv)
    run = Engine(store, cfg, shape, plan, machine, "cpu").run(w)
    assert torch.equal(run.tokens, ref.tokens)
    assert all(torch.equal(a, b) for a, b in zip(run.logits, ref.logits))
    copied = {e.unit for e in run.events if e.stage == "copy"}
    assert copied == {u.name for u, t in zip(shape.units, placements) if t.tier != "vram"}  # both GPUs' copiers


def test_full_loop_cli(ckpt, tmp_path, capsys):
    prof = tmp_path / "profile.json"
    assert main(["calibrate", "--quick", "--base", "rtx3080-laptop", "--model", str(ckpt / "config.json"),
                 "--dir", str(tmp_path), "--out", str(prof), "--peer", "airllm", "--peer", "accelerate"]) == 0
    data = json.loads(prof.read_text())
    assert data["calibration"]["method"] and data["calibration"]["date"] and data["machine"]["storage"]["cold_read_bytes_per_s"] > 0
    # AirLLM's cleanup after each module, timed in a fresh process holding transformers and the model on meta: a
    # full collection of its hundreds of thousands of objects, the profile's per-unit cost of the airllm engine
    cleanup = data["calibration"]["measurements"]["module_cleanup"]
    assert cleanup["gc_objects"] > 100_000 and 0 < min(cleanup["rounds_s"]) <= cleanup["cleanup_s"]
    assert data["machine"]["peers"]["airllm"]["load_unit_s"] == cleanup["cleanup_s"]
    # Accelerate's hooks on a small Llama's 6 disk-offloaded decoders of 9 parameter-holding modules each (4
    # attention projections, 3 MLP matrices, 2 norms), 3 rounds: either measured (the fastest disk run net of its
    # reads slower than the fastest RAM run, that difference per module in the profile) or refused as too noisy (the
    # profile keeps the base preset's value), on a loaded host as on an idle one; never a clamped zero
    hooks = data["calibration"]["measurements"]["accelerate_hooks"]
    assert hooks["modules"] == 54 and hooks["rounds"] == len(hooks["rounds_s"]) == 3
    profile_hook_s = data["machine"]["peers"]["accelerate"]["hook_module_s"]
    if "error" in hooks:
        assert "too noisy" in hooks["error"]
        assert profile_hook_s == get_machine("rtx3080-laptop").peers["accelerate"].hook_module_s
    else:
        assert hooks["disk_s"] > hooks["ram_s"] + hooks["reads_s"] > hooks["ram_s"]
        assert hooks["ram_s"] == min(r for r, _, _ in hooks["rounds_s"])
        assert profile_hook_s == hooks["hook_module_s"] == (hooks["disk_s"] - hooks["reads_s"] - hooks["ram_s"]) / 54
    assert not list(tmp_path.glob(".hook-cost-*"))  # its checkpoint and offload folder removed
    plan = tmp_path / "plan.json"
    assert main(["plan", str(ckpt), "--machine", str(prof), "--vram", "400KB", "--ram-budget", "4MB", "--prompt-tokens", "8",
                 "--new-tokens", "4", "--out", str(plan), "--time-budget", "0.5"]) == 0
    capsys.readouterr()
    out = tmp_path / "report"
    assert main(["validate", "--checkpoint", str(ckpt), "--plan", str(plan), "--profile", str(prof), "--vram", "400KB",
                 "--ram-budget", "4MB", "--prompt-tokens", "8", "--new-tokens", "4", "--cold", "--out", str(out), "--json",
                 "--store", str(tmp_path / "store")]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["exactness"]["tokens_identical"] and rep["exactness"]["logits_bit_identical"]
    assert len(rep["per_token"]) == 4 and rep["measured"]["time_per_token_s"] > 0
    for f in ("report.json", "report.gantt.png", "report.predicted.trace.json", "report.measured.trace.json"):
        assert (out / f).stat().st_size > 0


def test_validate_bad_plan(ckpt, capsys):
    rc = main(["validate", "--checkpoint", str(ckpt), "--plan", "nonsense"])
    assert rc == 2 and "neither a plan file nor a policy" in capsys.readouterr().err


def test_validate_missing_checkpoint(capsys, tmp_path):
    rc = main(["validate", "--checkpoint", str(tmp_path / "nope"), "--plan", "stream"])
    assert rc == 2 and "is not a folder" in capsys.readouterr().err


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny checkpoint whose embedding table (4096 x 128) outweighs a decoder, and its layer store."""
    from validate.store import build_store
    out = tmp_path_factory.mktemp("wide") / "tiny"
    args = [*TINY[:-1], "4096"]
    assert main(["make-checkpoint", "--preset", "qwen3-14b", *args, "--out", str(out)]) == 0
    build_store(out, load_model(str(out)), out.parent / "store", threads=2)
    return out, out.parent / "store"


def test_engine_runs_any_plan_the_simulator_accepts_as_simulated(wide):
    """Random plans (tiers, CPU compute, loader settings, an offload threshold): the engine runs each one the memory
    model accepts without overflowing a buffer it sized (a CPU embedding offloaded for a big prompt once overflowed
    the staging slots, lab/data/validation/matrix/matrix-p.json), executes exactly the copies and computes the simulator lays out, and its tokens and
    logits are bit-identical to the all-resident run (every unit on the CPU device here, so the same kernels)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hwmodels import get_machine
    from sim.costs.equations import machine_codec
    from sim.run.simulate import simulate
    from validate.engine import Engine
    ckpt, store = wide
    shape, machine = load_model(str(ckpt)), get_machine("rtx3080-laptop")
    cfg = json.loads((ckpt / "config.json").read_text())
    big = Budgets(vram_bytes=2**40, ram_bytes=2**40, pinned_bytes=2**40)
    emb = next(u.nbytes for u in shape.units if u.kind == "embedding")
    assert emb > max(u.nbytes for u in shape.units if u.kind == "decoder")
    tiers = ["vram", "ram_pinned", "ram_pageable", "ram_compressed", "disk_raw", "disk_compressed"]
    refs = {}

    @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.sampled_from(tiers), st.booleans()), min_size=len(shape.units),
                    max_size=len(shape.units)),
           st.integers(0, 2), st.integers(1, 3), st.sampled_from([None, 1, 6, 12]), st.integers(1, 2),
           st.integers(2, 6))
    def check(units, depth, slots, offload, batch, prompt):
        w = Workload(batch=batch, prompt_tokens=prompt, new_tokens=3)
        placements = tuple(Placement(unit=u.name, tier=t, compute="cpu" if c and t in ("ram_pinned", "ram_pageable",
                                                                                       "disk_raw") else "gpu")
                           for u, (t, c) in zip(shape.units, units))
        plan = Plan(model=shape.name, machine=machine.name, placements=placements, prefetch_depth=min(depth, slots),
                    vram_slots=slots, pinned_slots=2, codec=machine_codec(machine), gpu_offload_min_tokens=offload)
        if (batch, prompt) not in refs:
            refs[batch, prompt] = Engine(store, cfg, shape, POLICIES["resident"](shape, machine, w, big), machine,
                                         "cpu").run(w)
        run = Engine(store, cfg, shape, plan, machine, "cpu").run(w)
        sim = simulate(shape, machine, plan, w, big)
        done = {(e.token, e.unit, e.stage) for e in run.events if e.stage in ("copy", "compute")}
        assert done == {(e.token, e.unit, e.stage) for e in sim.events if e.stage in ("copy", "compute")}
        assert torch.equal(run.tokens, refs[batch, prompt].tokens)
        assert all(torch.equal(a, b) for a, b in zip(run.logits, refs[batch, prompt].logits))
    check()


def test_hook_cost_takes_each_runs_fastest_round():
    """(RAM run, disk run, reads inside it) a token: the fastest RAM run (10) and the disk run with the least time
    outside its reads (25 - 6 = 19) give 19 - 10 = 9; a round slowed by load (500) changes nothing."""
    from sim.engines.accelerate.hook_cost import hook_cost_per_token
    est = hook_cost_per_token([(10.0, 30.0, 5.0), (12.0, 25.0, 6.0), (500.0, 40.0, 4.0)])
    assert est == {"hook_s": 9.0, "ram_s": 10.0, "disk_s": 25.0, "reads_s": 6.0}


def test_hook_cost_too_noisy_is_refused_not_zero():
    """A disk run net of its reads no slower than the RAM run (noise above the hooks' cost) is an error naming why,
    which calibrate records while the profile keeps the preset's value, never a hook cost of 0."""
    from sim.engines.accelerate.hook_cost import hook_cost_per_token
    for rounds in ([(1.0, 2.0, 1.0)], [(1.0, 2.0, 0.5), (3.0, 1.5, 0.75)]):
        est = hook_cost_per_token(rounds)
        assert set(est) == {"error"} and "too noisy" in est["error"]


def test_hook_cost_without_accelerate_says_so(monkeypatch):
    """Without accelerate installed, calibrate records why Accelerate's hook cost was not measured (the profile keeps
    the preset's value) instead of failing."""
    import importlib.util
    from sim.engines.accelerate import hook_cost
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "accelerate" else real(n, *a))
    assert hook_cost.hook_module_s() == {"error": "accelerate not installed: Accelerate's hook cost not measured"}


def test_wait_per_token_is_the_decode_steps_idle_compute_over_their_count():
    """Two decode steps with 3 ms and 1 ms of waiting (the prefill's 50 ms wait is not a decode step's): 2 ms a
    token."""
    from sim.run.events import Event
    from validate.report import wait_per_token
    ev = [Event(0, "a", "wait", "gpu_wait", 0.0, 0.05), Event(0, "a", "compute", "gpu", 0.05, 0.1),
          Event(1, "a", "wait", "gpu_wait", 0.1, 0.102), Event(1, "b", "wait", "cpu_wait", 0.11, 0.111),
          Event(1, "a", "compute", "gpu", 0.102, 0.2), Event(2, "a", "wait", "gpu_wait", 0.2, 0.201),
          Event(2, "a", "compute", "gpu", 0.201, 0.3)]
    assert wait_per_token(ev) == pytest.approx(0.002)
    assert wait_per_token(ev[:2]) == 0.0
