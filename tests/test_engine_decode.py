"""The engine's static decode form (what its CUDA graphs capture) against the dynamic one, on the CPU."""
import torch

from validate import model as M


def test_static_decode_matches_attention_over_the_written_prefix():
    torch.manual_seed(0)
    arch = M.Arch(hidden=64, heads=4, kv_heads=2, head_dim=16, eps=1e-6, theta=10000.0, qk_norm=True)
    shapes = {"input_layernorm.weight": (64,), "post_attention_layernorm.weight": (64,),
              "self_attn.q_proj.weight": (64, 64), "self_attn.k_proj.weight": (32, 64),
              "self_attn.v_proj.weight": (32, 64), "self_attn.o_proj.weight": (64, 64),
              "self_attn.q_norm.weight": (16,), "self_attn.k_norm.weight": (16,),
              "mlp.gate_proj.weight": (128, 64), "mlp.up_proj.weight": (128, 64), "mlp.down_proj.weight": (64, 128)}
    w = {k: (torch.randn(s) * 0.1 + (1.0 if len(s) == 1 else 0.0)).float() for k, s in shapes.items()}
    prompt, new, batch = 5, 4, 2
    dyn = M.KVCache(arch, batch, prompt + new, "cpu", torch.float32)
    sta = M.KVCache(arch, batch, prompt + new, "cpu", torch.float32)
    x = torch.randn(batch, prompt, 64)
    cos, sin = M.rope(torch.arange(prompt), arch, torch.float32)
    M.decoder_layer(x, w, arch, dyn, 0, cos, sin)
    M.decoder_layer(x, w, arch, sta, 0, cos, sin)
    for step in range(new - 1):
        start = prompt + step
        tok = torch.randn(batch, 1, 64)
        cos, sin = M.rope(torch.tensor([start]), arch, torch.float32)
        a = M.decoder_layer(tok, w, arch, dyn, start, cos, sin)                         # attends over start + 1 keys
        b = M.decoder_layer(tok, w, arch, sta, start, cos, sin, torch.tensor([start]))  # the whole cache, masked
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    assert torch.equal(dyn.k, sta.k) and torch.equal(dyn.v, sta.v)                      # the same positions written
    assert not sta.k[:, :, prompt + new - 1].any()                                      # the last one never


def test_prepare_warms_eager_units_and_leaves_clean_caches():
    """Before the clock, every unit with weights in place runs one decode step (CPU-placed ones on the CPU); the
    caches it wrote are zeroed and the step state reset, so the timed run starts from the same state as without it."""
    from hwmodels.presets import load_machine
    from sim.model.families import shape_from_config
    from sim.plan import Workload
    from sim.engines.common import make_plan
    from validate.checkpoint import make_config
    from validate.compute_grid import random_blobs
    from validate.engine import Engine
    from validate.stream_run import StreamRun
    cfg = make_config("llama-3.1-8b", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256)
    cfg.pop("rope_scaling", None)
    shape = shape_from_config(cfg)
    machine = load_machine("h200-testbox")
    names = [u.name for u in shape.units]
    tiers = {n: "vram" if n == names[0] else "ram_pageable" for n in names}  # a resident embedding, streamed rest
    plan = make_plan(shape, machine, "t", tiers, {names[1]: "cpu"})
    engine = Engine(None, cfg, shape, plan, machine, device="cpu", blobs=random_blobs(cfg, shape, "cpu"))
    run = StreamRun(engine, Workload(batch=2, prompt_tokens=3, new_tokens=3), None)
    seen = []
    run.capture = lambda: seen.append((run.start, int(run.dec.pos), int(run.dec.pos_cpu)))
    with torch.inference_mode():
        run.prepare()
    # graphs are captured with the prefill at position 0 (its cache writes are baked into the graph) and the decode
    # position at 3 + 3 - 1 = 5, which no step writes (masked until the caches are zeroed)
    assert seen == [(0, 5, 5)]
    assert run.start == 0 and not run.graphs                                      # no CUDA: nothing captured
    assert all(not c.k.any() and not c.v.any() for c in run.caches.values())    # what the warm-up wrote is gone
    assert run.dec.x.abs().sum() > 0                                              # ... after the embedding ran
    a = engine.run(Workload(batch=2, prompt_tokens=3, new_tokens=3))
    b = engine.run(Workload(batch=2, prompt_tokens=3, new_tokens=3))
    assert all(torch.equal(x, y) for x, y in zip(a.logits, b.logits))
