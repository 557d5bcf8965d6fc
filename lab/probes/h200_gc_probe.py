"""Why AirLLM's cleanup took longer in its runs than `calibrate` timed it (lab/journal/peers.md, twenty-eighth session).

AirLLM's time per token is one full garbage collection per module it streams; `calibrate` times that collection in a
fresh interpreter holding the imports and the model on the meta device (sim/engines/airllm/cleanup.py). In calls Q-V
the collections inside the runs took 1.05-1.33x what calibrate timed minutes before, with 2% more objects. This probe
times the collection (`gc.collect` alone, as `cleanup_once` does it) in fresh interpreters at stages that add, one
at a time, what AirLLM's process has beyond calibrate's:
  A  calibrate's state: torch, transformers, accelerate, airllm imported, the model on meta
  A+ the same, each collection after a turn of AirLLM's loop on one decoder (layer_cycle: its weights made real on
     the GPU, multiplied, moved back to meta), each timed as `cleanup_once` (the whole cleanup)
  B  + one decoder's tensors allocated on the GPU and freed (CUDA initialised; where A+ ran, since A+: the records
     gc-probe-u2/-v2 have A+, gc-probe-u/-v do not)
  C  + AirLLM's own model of the checkpoint built (airllm.AutoModel.from_pretrained), not yet run
  D  + one generation of a few tokens by it (AirLLM's own collections during it timed too)
Each stage records the tracked objects and the references they hold (what a collection traverses). Processes run
in `--rounds` interleaved rounds (the host's speed moves between minutes).
Run (H200): python lab/probes/h200_gc_probe.py --arch qwen3-0.6b-tied:12 --rounds 3 --work /tmp/osp --out $OUT/gc.json
Here: python lab/probes/h200_gc_probe.py --report lab/data/peers/gc-probe.json
"""
from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def collections(n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        gc.collect()
        out.append(time.perf_counter() - t)
    return out


def layer_cycle(model, device: str):
    """One turn of AirLLM's loop on the model's first decoder: its weights made real on `device`, each matrix
    multiplied by a vector, then the decoder moved back to `meta` (what its pre-hook, the forward and its post-hook
    do, without the file read)."""
    import torch
    layer = model.model.layers[0]

    def turn() -> None:
        layer.to_empty(device=device)
        with torch.no_grad():
            for w in layer.parameters():
                if w.dim() == 2:
                    w.normal_()
                    w @ torch.ones(w.shape[1], dtype=w.dtype, device=device)
        if device == "cuda":
            torch.cuda.synchronize()
        layer.to("meta")
    return turn


def census() -> dict:
    objs = gc.get_objects()
    return {"objects": len(objs), "references": sum(len(gc.get_referents(o)) for o in objs)}


def child(ckpt: Path, n: int, tokens: int) -> dict:
    """The four stages in this interpreter (on the CPU where there is no GPU: a smoke test)."""
    import importlib
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    for name in ("accelerate", "airllm"):
        importlib.import_module(name)
    config = json.loads((ckpt / "config.json").read_text())
    cfg = AutoConfig.for_model(**{k: v for k, v in config.items() if not k.startswith("_")})
    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(cfg)
    out = {}

    def stage(name: str) -> None:
        out[name] = {"collect_s": collections(n), **census()}
        print(name, f"{statistics.median(out[name]['collect_s']):.4f}", out[name]["objects"], flush=True)
    stage("A meta model")
    from sim.engines.airllm.cleanup import cleanup_once
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    turn = layer_cycle(meta, dev)
    times = []
    for _ in range(n):
        turn()
        times.append(cleanup_once())
    out["A+ after a decoder's turn"] = {"collect_s": times, **census()}
    print("A+", f"{statistics.median(times):.4f}", flush=True)
    h, f = config["hidden_size"], config["intermediate_size"]
    layer = [torch.empty(s, dtype=torch.bfloat16, device=dev) for s in ((h, h), (h, h), (f, h), (f, h), (h, f))]
    del layer
    stage("B cuda")
    del meta
    import airllm
    from airllm.airllm_base import AirLLMBaseModel
    AirLLMBaseModel.get_tokenizer = lambda self, hf_token=None: None  # random checkpoints ship no tokenizer
    from lab.campaigns.h200_peers import Phases, prompt
    phases = Phases()
    phases.install()
    model = airllm.AutoModel.from_pretrained(str(ckpt), layer_shards_saving_path=str(ckpt.parent / "airllm"),
                                             device=f"{dev}:0" if dev == "cuda" else dev, max_seq_len=4096)
    phases.take()
    stage("C airllm built")
    ids = prompt(config["vocab_size"], 1, 64, dev)
    with torch.no_grad():
        model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
    own = phases.take().get("gc.collect", {})
    stage("D after generating")
    out["in_run_collect_s"] = own.get("total_s", 0.0) / max(own.get("calls", 1), 1)
    return out


def report(path: Path) -> None:
    d = json.loads(path.read_text())
    rounds = d["rounds"]
    names = [k for k in next((r for r in rounds if "error" not in r), {}) if k != "in_run_collect_s"]
    print(f"{d['arch']}, {len(rounds)} processes; median collection (s), tracked objects, references; vs stage A")
    for r, res in enumerate(rounds):
        if "error" in res:
            print(f"process {r}: {res['error'][-300:]}")
            continue
        a = statistics.median(res[names[0]]["collect_s"])
        med = {k: statistics.median(res[k]["collect_s"]) for k in names}
        cells = [f"{k.split()[0]} {med[k]:.4f} s ({med[k] / a:.2f}x, {res[k]['objects']} obj, "
                 f"{res[k]['references']} refs)" for k in names]
        print(f"process {r}: " + "; ".join(cells) + f"; AirLLM's own in the run {res['in_run_collect_s']:.4f} s "
              f"({res['in_run_collect_s'] / a:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen3-0.6b-tied:12")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--collections", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=3)
    ap.add_argument("--work", default="/tmp/offloadsim-gc")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--report", default=None, help="print the table of a recorded probe")
    a = ap.parse_args()
    if a.report:
        report(Path(a.report))
        return
    if a.child:
        res = child(Path(a.child), a.collections, a.tokens)
        print("RESULT " + json.dumps(res))
        return
    from validate.archs import arch_config
    from validate.checkpoint import make_checkpoint
    arch, cfg = arch_config(a.arch)
    ckpt = Path(a.work) / arch / "ckpt"
    shutil.rmtree(ckpt.parent, ignore_errors=True)
    import torch
    make_checkpoint(cfg, ckpt, device="cuda" if torch.cuda.is_available() else "cpu")
    out = {"arch": a.arch, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv),
           "python": sys.version.split()[0], "rounds": []}
    for _ in range(a.rounds):
        res = subprocess.run([sys.executable, "-m", "lab.probes.h200_gc_probe", "--child", str(ckpt),
                              "--collections", str(a.collections), "--tokens", str(a.tokens)],
                             capture_output=True, text=True)
        print(res.stdout[-2000:], res.stderr[-1500:] if res.returncode else "", flush=True)
        line = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
        out["rounds"].append(json.loads(line[-1][7:]) if line else {"error": res.stderr[-1500:]})
        shutil.rmtree(ckpt.parent / "airllm", ignore_errors=True)
    if a.out:
        tmp = Path(a.out).with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1))
        tmp.replace(a.out)
        report(Path(a.out))


if __name__ == "__main__":
    main()
