"""Two GPUs and a KV cache in RAM, predicted against measured on the lent two-GPU H200 machine (nvidia-h200-x2).

What a user does: a random-weight checkpoint of a real layer shape, its layer store, a calibration of GPU 0 (the
profile, taken for each GPU: hwmodels.topology.with_gpus), then
- two-GPU plans (planner.devices.own_plan: layers split in two, each GPU streaming its share over its own link) at
  four VRAM budgets per GPU, batch 1 and 8, prompts of 512 and 4096 tokens: 12 plans, each run twice;
- one-GPU plans with the KV cache in pinned or pageable RAM (copied around each layer) at contexts of 8k to 64k:
  8 plans, each run twice;
every run on a fresh engine, bit-checked against the all-resident run, its predicted and measured time printed. First
a probe of the machine itself: each link's pinned copy speed alone and with both links copying at once (the
h200-x2 preset's host-memory estimate), and whether the GPUs copy peer to peer.
Run (nvidia-h200-x2): python lab/campaigns/h200x2_multigpu.py --out $OUT/multigpu-a.json
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import torch

from hwmodels.units import GiB
from lab.campaigns.h200_matrix import log, prepare_arch, run_case
from validate.archs import ARCHS

BUDGETS = (0.3, 0.45, 0.6, 0.8)  # VRAM per GPU, a share of the weights
SHAPES = ((1, 512), (8, 4096), (1, 4096))  # (batch, prompt) of the two-GPU runs
CONTEXTS = (8192, 16384, 32768, 65536)


def link_probe(nbytes: int = 1 << 30, rounds: int = 3) -> dict:
    """Pinned host-to-device GB/s of each GPU alone and of both at once (threads), and the peer-to-peer rate."""
    n = torch.cuda.device_count()
    src = [torch.empty(nbytes, dtype=torch.uint8, pin_memory=True) for _ in range(n)]
    dst = [torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{g}") for g in range(n)]

    def copy(g: int, out: dict) -> None:
        torch.cuda.synchronize(g)
        t = time.perf_counter()
        for _ in range(rounds):
            dst[g].copy_(src[g], non_blocking=True)
        torch.cuda.synchronize(g)
        out[g] = rounds * nbytes / (time.perf_counter() - t) / 1e9
    alone: dict = {}
    for g in range(n):
        copy(g, alone)
    both: dict = {}
    threads = [threading.Thread(target=copy, args=(g, both)) for g in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = {"gpus": n, "alone_GBps": alone, "together_GBps": both}
    if n > 1:
        out["peer_access"] = torch.cuda.can_device_access_peer(0, 1)
        torch.cuda.synchronize(0)
        t = time.perf_counter()
        for _ in range(rounds):
            dst[1].copy_(dst[0])
        torch.cuda.synchronize(1)
        out["gpu0_to_gpu1_GBps"] = rounds * nbytes / (time.perf_counter() - t) / 1e9
    return out


def prepare_quick(arch: str, work: Path, layers: int) -> tuple:
    """prepare_arch with a quick calibration (a shorter lease): checkpoint, store, shape, config, profile, entry."""
    from sim.model.resolve import load_model
    from validate.calibrate import calibrate
    from validate.checkpoint import make_checkpoint, make_config
    from validate.store import build_store
    preset, over = ARCHS[arch]
    cfg = make_config(preset, **dict(over, num_hidden_layers=layers))
    cfg.pop("rope_scaling", None)
    ckpt, store = work / arch / "ckpt", work / arch / "store"
    make_checkpoint(cfg, ckpt, device="cuda")
    shape = load_model(str(ckpt))
    config = json.loads((ckpt / "config.json").read_text())
    build_store(ckpt, shape, store, compress=False, threads=16)
    prof = calibrate("h200-testbox", work / arch, config, quick=True, eager=False)
    prof_path = work / arch / "profile.json"
    prof_path.write_text(json.dumps(prof, default=float))
    log(arch, "prepared (quick calibration)")
    return ckpt, store, shape, config, prof_path, {"arch": arch, "profile": prof,
                                                   "shape": json.loads(shape.model_dump_json()), "runs": []}


def cases(shape, machine, new_tokens: int, gpus: int) -> list[tuple]:
    """(label, plan, budgets, cold, batch, prompt, machine) of every run; the two-GPU ones where two are visible."""
    from hwmodels.topology import with_gpus
    from planner.devices import own_plan
    from sim.costs.memory import PlanError
    from sim.plan import Budgets, Request, Workload
    from sim.engines.common import make_plan
    two = with_gpus(machine, 2)
    total = sum(u.nbytes for u in shape.units)
    out = []
    for frac in BUDGETS if gpus >= 2 else ():
        for b, p in SHAPES:
            w = Workload(batch=b, prompt_tokens=p, new_tokens=new_tokens)
            bud = Budgets.of(two, vram=int(frac * total))
            for slots in (3, 2, 1):
                try:
                    plan = own_plan(Request(shape, two, w, bud), "vram", slots)
                    break
                except PlanError:
                    plan = None
            if plan is not None:
                out.append((f"2 GPUs {frac:.2f} of the weights each", plan, bud, False, b, p, two))
    resident = {u.name: "vram" for u in shape.units}
    for ctx in CONTEXTS:
        for kv in ("pinned", "pageable"):
            plan = make_plan(shape, machine, f"kv-{kv}", resident, kv=kv)
            out.append((f"KV cache in {kv} RAM, context {ctx // 1024}k", plan, Budgets.of(machine), False, 1,
                        ctx - new_tokens, machine))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="llama-8b")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--work", default="/tmp/offloadsim-multigpu")
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=560, help="stop starting runs after this many seconds")
    ap.add_argument("--new-tokens", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a quick calibration (a shorter lease)")
    a = ap.parse_args()
    from hwmodels.presets import load_machine
    from sim.plan import Budgets, Workload
    from sim.engines.placements import POLICIES
    from validate.engine import Engine
    t0 = time.perf_counter()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"torch": torch.__version__, "gpus": torch.cuda.device_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "probe": link_probe(), "runs": []}
    log("probe", result["probe"])
    ckpt, store, shape, config, prof_path, entry = (prepare_quick(a.arch, Path(a.work), a.layers) if a.quick else
                                                    prepare_arch(a.arch, Path(a.work), False, a.layers))
    result.update(arch=a.arch, profile=entry["profile"], shape=entry["shape"])
    machine = load_machine(str(prof_path))
    resident = Engine(store, config, shape, POLICIES["resident"](shape, machine, Workload(), Budgets.of(machine)), machine)
    refs: dict = {}

    def reference(b, p):
        if (b, p) not in refs:
            refs[(b, p)] = resident.run(Workload(batch=b, prompt_tokens=p, new_tokens=a.new_tokens))
        return refs[(b, p)]
    todo = [c for c in cases(shape, machine, a.new_tokens, torch.cuda.device_count()) for _ in range(a.repeats)]
    if torch.cuda.device_count() < 2:
        log("one GPU visible: the two-GPU runs are left out")
    entry["runs"] = result["runs"]
    for label, plan, bud, cold, b, p, m in todo:
        if time.perf_counter() - t0 > a.budget_s:
            result["runs"].append({"label": label, "skipped": "deadline"})
            continue
        run_case(entry, (label, plan, bud, cold, b, p), reference, store, config, shape, m, a.new_tokens)
        torch.cuda.empty_cache()
        out.write_text(json.dumps(result, indent=1, default=float))
    done = [r for r in result["runs"] if "predicted" in r]
    for r in done:
        log(f"{r['label']:<44} b{r['batch']} p{r['prompt']}: predicted {r['predicted']['time_per_token_s']:.5f} "
            f"measured {r['measured']['time_per_token_s']:.5f} s/token ({r['error_pct']['time_per_token']:+.1f}%)")
    log(f"{len(done)} runs measured; GPU 0 free/total GiB {[round(x / GiB, 1) for x in torch.cuda.mem_get_info(0)]}")
    out.write_text(json.dumps(result, indent=1, default=float))


if __name__ == "__main__":
    main()
