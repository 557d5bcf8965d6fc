"""Exported Accelerate device_maps that load and run: tiny random checkpoints of dense and MoE families, many plans
each (every unit's tier drawn at random: the GPU where one is present, RAM, disk), exported by to_accelerate,
loaded with from_pretrained(device_map=..., offload_folder=...) and run forward. Prints 'N of N load and run'.

    python benchmarks/accelerate_load_sweep.py --plans 12          # CPU and disk (about 2 minutes on 2 cores)
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TINY_DENSE = {
    "llama": dict(model_type="llama", hidden_size=32, intermediate_size=32, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=64),
    "qwen3": dict(model_type="qwen3", hidden_size=32, intermediate_size=32, num_hidden_layers=3, head_dim=8,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=64, tie_word_embeddings=True),
}


def sweep(plans: int, seed: int) -> tuple[int, int, list[str]]:
    import torch
    import transformers

    from hwmodels import get_machine
    from sim.engines.accelerate.export import to_accelerate
    from sim.engines.common import make_plan
    from sim.model.families import shape_from_config
    from sim.plan import Workload
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_accelerate_load import TINY  # the test's tiny MoE configs

    rng = random.Random(seed)
    gpu = torch.cuda.is_available()
    choices = (["vram"] if gpu else []) + ["ram_pageable", "disk_raw"]
    ok, total, failed = 0, 0, []
    for family, cfg in {**TINY_DENSE, **TINY}.items():
        folder = Path(tempfile.mkdtemp())
        torch.manual_seed(0)
        transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg)).save_pretrained(folder)
        shape = shape_from_config(dict(cfg, torch_dtype="float32"))
        for _ in range(plans):
            tiers = {u.name: rng.choice(choices) for u in shape.units}
            on_cpu = None if any(t == "vram" for t in tiers.values()) else {n: "cpu" for n in tiers}
            plan = make_plan(shape, get_machine("h200-testbox"), "sweep", tiers, on_cpu)
            dm = to_accelerate(shape, plan, Workload(), 2**30, 2**30)["device_map"]
            total += 1
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = transformers.AutoModelForCausalLM.from_pretrained(
                        folder, device_map=dm, offload_folder=tempfile.mkdtemp())
                    with torch.no_grad():
                        model(torch.tensor([[1, 2, 3]], device="cuda" if gpu else "cpu"))
                ok += 1
            except Exception as exc:  # a map that does not load: reported, the sweep goes on
                failed.append(f"{family} {dm}: {str(exc)[:120]}")
    return ok, total, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", type=int, default=12, help="random plans per family")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ok, total, failed = sweep(args.plans, args.seed)
    for line in failed:
        print("failed:", line)
    print(f"{ok} of {total} load and run")
    return 0 if ok == total else 1


if __name__ == "__main__":
    sys.exit(main())
