"""Does the host's last-level cache make the CPU grid faster than a whole model runs (lab/journal/peers.md, 24th session)?

calibrate times CPU decode on a 3-layer copy of the model (validate/compute_grid.py). On the H200 host (a 300 MiB L3
shared by the VM's 16 cores) a 3-layer copy of a small model is 0.7-1.5 GB, a few times the cache; a whole model
on the CPU is several times more. If a share of the weights survives in the cache from one token to the next, the
copy reads less from memory per byte than the model does, and transformers' CPU decode runs over the grid the more,
the smaller the model (Phi-3-mini's 20-32% in calls G and H). This probe measures, interleaved over rounds:
- matrix-vector products (batch 1 and 4) cycled over distinct bf16 matrices whose total is the working set, from
  32 MiB to 8 GiB: speed against working set;
- offloadsim's functional decoder layers (validate/model.py, as the engine and its CPU grid run them) of two shapes
  cycled over 1 to 16 distinct layers: time per layer against working set;
- calibrate's own CPU grid (validate/compute_grid.py measure_grids) of one shape on copies of 3 and of more layers.

    python3 lab/probes/h200_cpu_cache_probe.py --out $OUT/cpu-cache.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from validate.archs import arch_config

MiB = 2**20


def gemv_speed(mats: list[torch.Tensor], batch: int, seconds: float) -> float:
    """Bytes per second of x @ W.T cycled over `mats` (each read once per cycle) for about `seconds`."""
    x = torch.randn(batch, mats[0].shape[1], dtype=torch.bfloat16)
    for m in mats:  # one pass to fault in and warm
        x @ m.T
    nbytes, t0, done = sum(m.numel() * 2 for m in mats), time.perf_counter(), 0
    while True:
        for m in mats:
            x @ m.T
        done += 1
        el = time.perf_counter() - t0
        if el >= seconds and done >= 3:
            return done * nbytes / el


def layer_ms(layers: list[dict], arch, batch: int, steps: int, ctx: int) -> float:
    """Median milliseconds per layer of a decode step over `layers` (distinct weights), each step all of them."""
    import validate.model as M
    caches = [M.KVCache(arch, batch, ctx + steps + 2, "cpu", torch.bfloat16) for _ in layers]
    x0 = torch.randn(batch, 1, arch.hidden, dtype=torch.bfloat16)
    times = []
    for s in range(steps + 1):
        p = torch.tensor([ctx + s])
        cos, sin = M.rope(p, arch, torch.bfloat16)
        t = time.perf_counter()
        x = x0
        for w, c in zip(layers, caches):
            x = M.decoder_layer(x, w, arch, c, ctx + s, cos, sin, p)
        times.append((time.perf_counter() - t) / len(layers))
    return 1e3 * statistics.median(times[1:])


def random_layers(cfg: dict, n: int) -> list[dict]:
    from validate.compute_grid import unit_tensor_shapes
    out = []
    for _ in range(n):
        out.append({k: (torch.ones(s, dtype=torch.bfloat16) if len(s) == 1 else
                        torch.empty(s, dtype=torch.bfloat16).normal_(0, 0.02))
                    for k, s in unit_tensor_shapes(cfg, "decoder").items()})
    return out


def grid_by_copy(spec: str, copies: list[int], rounds: int) -> dict[int, dict[int, list[float]]]:
    """calibrate's CPU decode grid (pageable weights, batch 1 and 4, a 128-token prompt) measured on copies of
    `copies` layers, interleaved: copy layers -> batch -> decoder milliseconds, one per round."""
    from hwmodels.presets import load_machine
    from validate.compute_grid import measure_grids
    _, cfg = arch_config(spec)
    machine = load_machine("h200-testbox")
    out: dict[int, dict[int, list[float]]] = {n: {1: [], 4: []} for n in copies}
    for _ in range(rounds):
        for n in copies:
            grids = measure_grids(cfg, machine, "cpu", batches=(1, 4), prompts=(128,), layers=n, graphs=False)
            g = next(g for g in grids if g.unit.kind == "decoder")
            for i, b in enumerate(g.batch):
                out[n][b].append(1e3 * g.decode_s[i][0])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", default="phi3-mini,qwen3-4b")
    ap.add_argument("--layers", default="1,2,3,4,6,8,12,16")
    ap.add_argument("--sets-mib", default="32,64,128,192,256,384,512,768,1024,1536,2048,4096,8192")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--grid-arch", default="phi3-mini")
    ap.add_argument("--grid-layers", default="3,12")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import validate.model as M
    torch.set_num_threads(os.cpu_count() or 4)
    torch.manual_seed(0)
    sets = [int(s) for s in a.sets_mib.split(",")]
    mat = (4096, 4096)  # 32 MiB in bf16
    pool = [torch.empty(mat, dtype=torch.bfloat16).normal_(0, 0.02) for _ in range(max(sets) // 32)]
    ns = [int(n) for n in a.layers.split(",")]
    shapes = {}
    for spec in a.archs.split(","):
        name, cfg = arch_config(spec)
        arch = M.Arch.from_config(dict(cfg, tie_word_embeddings=False))
        layers = random_layers(cfg, max(ns))
        shapes[name] = (arch, layers, sum(t.numel() * 2 for t in layers[0].values()))
    gemv = {b: {s: [] for s in sets} for b in (1, 4)}
    dec = {name: {b: {n: [] for n in ns} for b in (1, 4)} for name in shapes}
    with torch.no_grad():
        for r in range(a.rounds):
            for b in (1, 4):
                for s in sets:
                    gemv[b][s].append(gemv_speed(pool[:max(s // 32, 1)], b, 0.3))
                for name, (arch, layers, _) in shapes.items():
                    for n in ns:
                        dec[name][b][n].append(layer_ms(layers[:n], arch, b, 6, 128))
            print(f"round {r}: GB/s at b1 " + " ".join(f"{s}:{gemv[1][s][-1] / 1e9:.0f}" for s in sets), flush=True)
    grid = grid_by_copy(a.grid_arch, [int(n) for n in a.grid_layers.split(",")], a.rounds)
    med = {"gemv_gb_per_s": {b: {s: statistics.median(v) / 1e9 for s, v in g.items()} for b, g in gemv.items()},
           "decoder_ms_per_layer": {name: {b: {n: statistics.median(v) for n, v in d.items()} for b, d in per.items()}
                                    for name, per in dec.items()},
           "decoder_bytes": {name: v[2] for name, v in shapes.items()},
           "grid_decoder_ms": {n: {b: statistics.median(v) for b, v in per.items()} for n, per in grid.items()}}
    for b in (1, 4):
        print(f"batch {b}: GB/s by working set (MiB): "
              + " ".join(f"{s}:{v:.1f}" for s, v in med["gemv_gb_per_s"][b].items()))
        for name, per in med["decoder_ms_per_layer"].items():
            lb = med["decoder_bytes"][name]
            print(f"  {name} ({lb / MiB:.0f} MiB a layer) ms/layer by layers: "
                  + " ".join(f"{n}:{v:.2f}({lb / v / 1e6:.0f}GB/s)" for n, v in per[b].items()))
    print(f"calibrate's CPU grid of {a.grid_arch}, decoder ms at context 131 by copy layers and batch: "
          + str({n: {b: round(v, 2) for b, v in per.items()} for n, per in med["grid_decoder_ms"].items()}))
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "torch": torch.__version__,
           "threads": torch.get_num_threads(), "rounds": {"gemv": gemv, "decoder": dec}, "median": med,
           "method": __doc__}
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(a.out)


if __name__ == "__main__":
    main()
