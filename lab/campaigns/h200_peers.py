"""The peer engines measured (issue 11): Hugging Face Accelerate (through transformers' `from_pretrained` with a
`device_map`) and AirLLM, on random-weight checkpoints of real layer shapes, with the offloadsim calibration of the
same machine, so that `lab/reports/peers_report.py` can predict every run with the peer engine models and compare.

Per architecture: a checkpoint, a full `calibrate` (the machine profile the predictions use), then
- Accelerate: `device_map="auto"` with `max_memory` at several GPU budgets (all on the GPU, about 60% and 30% of the
  weights; the last also with a CPU budget small enough that Accelerate offloads to disk), batch 1 and 4; the device
  map Accelerate chose is recorded (the report checks the placement model against it);
- AirLLM 4.0: warm (page cache holds the layer shards) at batch 1 and 4, and cold (page cache dropped before the
  request; needs root);
- an exported offloadsim plan for Accelerate (`plan --engine accelerate --export accelerate`), loaded as exported.
Times come from a logits processor that synchronises and stamps every generated token: TTFT is the first stamp after
the call, time per token the mean gap of the later stamps. A generation of the same shapes warms each Accelerate engine first (a short one for AirLLM, whose 3 s per token
dwarfs the one-time attention-plan builds).
Run (H200): python lab/campaigns/h200_peers.py --archs llama-8b:8,qwen3-4b:12 --out $OUT/peers-a.json
Here: python lab/reports/peers_report.py lab/data/peers/peers-a.json
"""
from __future__ import annotations

import argparse
import gc
import itertools
import json
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

from validate.archs import arch_config
from lab.campaigns.h200_matrix import TINY, host_gbps, log
from hwmodels.units import GiB
RAM = 100 * GiB  # the CPU budget of every Accelerate map without a RAM limit


class Stamps:
    """A logits processor that only records when each token's logits were ready."""

    def __init__(self, sync):
        self.t: list[float] = []
        self.sync = sync

    def __call__(self, input_ids, scores):
        self.sync()
        self.t.append(time.perf_counter())
        return scores


def timed_generate(model, ids, new_tokens: int, sync) -> dict:
    from transformers import LogitsProcessorList
    st = Stamps(sync)
    sync()
    t0 = time.perf_counter()
    model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                   logits_processor=LogitsProcessorList([st]))
    gaps = [b - a for a, b in zip(st.t, st.t[1:])]
    return {"ttft_s": st.t[0] - t0, "time_per_token_s": sum(gaps) / max(len(gaps), 1), "token_gaps_s": gaps,
            "total_s": st.t[-1] - t0}


def prompt(vocab: int, batch: int, tokens: int, device) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, tokens), generator=torch.Generator().manual_seed(0)).to(device)


def drop_caches() -> bool:
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def accelerate_run(ckpt: Path, work: Path, vocab: int, device_map, max_memory, batch: int, prompt_tokens: int,
                   new_tokens: int, dev: str, sync) -> dict:
    from transformers import AutoModelForCausalLM
    off = work / "offload"
    shutil.rmtree(off, ignore_errors=True)
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16, device_map=device_map,
                                                 max_memory=max_memory, offload_folder=str(off))
    load_s = time.perf_counter() - t
    # the prompt where the model computes: a map without a GPU entry runs on the CPU (transformers would move it)
    on = {str(v) for v in getattr(model, "hf_device_map", {}).values()}
    ids = prompt(vocab, batch, prompt_tokens, dev if not on or on - {"cpu", "disk"} else "cpu")
    with torch.no_grad():
        # warm-up with the same shapes: cuDNN's attention builds an execution plan per new KV length (40-60 ms
        # each, once per process; lab/journal/peers.md), which a long-running engine has paid already
        timed_generate(model, ids, new_tokens, sync)
        res = timed_generate(model, ids, new_tokens, sync)
    res.update(load_s=load_s, hf_device_map={k: str(v) for k, v in getattr(model, "hf_device_map", {}).items()},
               gpu_peak_bytes=torch.cuda.max_memory_allocated() if dev == "cuda" else 0)
    del model
    gc.collect()
    if dev == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    shutil.rmtree(off, ignore_errors=True)
    return res


class Phases:
    """Where AirLLM's time goes: wall time inside its per-module steps (airllm 4.0 airllm_base.py), summed per run.
    `load_layer_to_cpu` (safetensors load + pin) runs on the prefetch thread, overlapped; `_pre_hook` waits for it
    and copies the module to the GPU; `_post_hook` moves it to meta and calls `clean_memory` (gc.collect,
    malloc_trim, torch.cuda.empty_cache), timed on its own too, and its `gc.collect`. Installed before the model is built, since the hooks
    are bound then; two clock reads a call against AirLLM's 0.2-0.4 s a module."""
    NAMES = ("load_layer_to_cpu", "move_layer_to_device", "_pre_hook", "_post_hook")

    def __init__(self):
        self.sums: dict[str, list[float]] = {}

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                rec = self.sums.setdefault(name, [0.0, 0])
                rec[0] += time.perf_counter() - t
                rec[1] += 1
        return timed

    def install(self) -> None:
        import airllm.airllm_base as base
        for name in self.NAMES:
            setattr(base.AirLLMBaseModel, name, self.wrap(name, getattr(base.AirLLMBaseModel, name)))
        base.clean_memory = self.wrap("clean_memory", base.clean_memory)
        gc.collect = self.wrap("gc.collect", gc.collect)  # its first part (airllm.utils looks it up at each call)

    def take(self) -> dict:
        out = {k: {"total_s": v[0], "calls": v[1]} for k, v in self.sums.items()}
        self.sums = {}
        return out


def airllm_runs(ckpt: Path, work: Path, vocab: int, cases, new_tokens: int, dev: str, sync) -> list[dict]:
    import airllm
    from airllm.airllm_base import AirLLMBaseModel
    AirLLMBaseModel.get_tokenizer = lambda self, hf_token=None: None  # random checkpoints ship no tokenizer
    phases = Phases()
    phases.install()
    shards = work / "airllm"
    t = time.perf_counter()
    model = airllm.AutoModel.from_pretrained(str(ckpt), layer_shards_saving_path=str(shards),
                                             device=f"{dev}:0" if dev == "cuda" else dev, max_seq_len=4096)
    split_s = time.perf_counter() - t
    out = []
    for batch, prompt_tokens, cold in cases:
        ids = prompt(vocab, batch, prompt_tokens, dev)
        with torch.no_grad():
            timed_generate(model, ids[:, :8], 2, sync)  # warm-up: the shards are in the page cache after it
            dropped = drop_caches() if cold else False
            phases.take()
            res = timed_generate(model, ids, new_tokens, sync)
        res.update(batch=batch, prompt=prompt_tokens, cold=cold, caches_dropped=dropped, split_s=split_s,
                   phases=phases.take(), gc_objects=len(gc.get_objects()))
        out.append(res)
        log("airllm", f"b{batch} p{prompt_tokens} cold={cold}", f"ttft {res['ttft_s']:.3f} tpot {res['time_per_token_s']:.3f}")
    del model
    gc.collect()
    shutil.rmtree(shards, ignore_errors=True)
    return out


def airllm_in_fresh_process(ckpt: Path, vocab: int, cases, new_tokens: int, dev: str) -> list[dict]:
    """`airllm_runs` in a new interpreter, as a user runs AirLLM: its cleanup after every module walks all the
    objects of its process, and this one holds the calibration's and Accelerate's too."""
    job = ckpt.parent / "airllm-job.json"
    job.write_text(json.dumps({"ckpt": str(ckpt), "vocab": vocab, "cases": cases, "new_tokens": new_tokens,
                               "dev": dev, "out": str(ckpt.parent / "airllm-runs.json")}))
    subprocess.run([sys.executable, "-m", "lab.campaigns.h200_peers", "--airllm-job", str(job), "--out", "-"],
                   check=True)
    return json.loads((ckpt.parent / "airllm-runs.json").read_text())


def airllm_job(path: Path) -> None:
    """The child of `airllm_in_fresh_process`."""
    job = json.loads(path.read_text())
    dev = job["dev"]
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    ckpt = Path(job["ckpt"])
    runs = airllm_runs(ckpt, ckpt.parent, job["vocab"], [tuple(c) for c in job["cases"]], job["new_tokens"], dev, sync)
    Path(job["out"]).write_text(json.dumps(runs, default=float))


def exported_plan(shape, machine, w, vram: int, ram: int) -> dict:
    """What `offloadsim plan --engine accelerate --export accelerate` gives for these budgets."""
    from planner.engines import plan_for_engine
    from sim.engines.accelerate.export import to_accelerate
    from sim.plan import Budgets
    budgets = Budgets.of(machine, vram=vram, ram=ram)
    rep = plan_for_engine("accelerate", shape, machine, w, budgets)
    if rep.plan is None:
        raise RuntimeError(rep.reason)
    exp = to_accelerate(shape, rep.plan, w, budgets.vram_bytes, budgets.ram_bytes)
    return {"plan": json.loads(rep.plan.model_dump_json()), "predicted_tpot_s": rep.time_per_token_s,
            "export": exp}


def prepare(spec: str, work: Path, dev: str, calibrated: bool = True) -> tuple:
    """A random-weight checkpoint of NAME[:LAYERS] and its calibration (or, not calibrated, the h200-testbox preset
    as the profile). Returns (checkpoint, shape, config, machine, the entry to record)."""
    from hwmodels.presets import load_machine
    from sim.model.resolve import load_model
    from validate.calibrate import calibrate
    from validate.checkpoint import make_checkpoint
    arch, cfg = arch_config(spec, {"tiny": ("llama-3.1-8b", TINY)})  # tiny: a smoke test on any device
    base = work / arch
    shutil.rmtree(base, ignore_errors=True)
    ckpt = base / "ckpt"
    make_checkpoint(cfg, ckpt, device=dev)
    shape = load_model(str(ckpt))
    config = json.loads((ckpt / "config.json").read_text())
    t = time.perf_counter()
    prof = calibrate("h200-testbox", base, config, quick=dev != "cuda") if calibrated else \
        {"machine": json.loads(load_machine("h200-testbox").model_dump_json()), "calibrate": "skipped: the preset"}
    prof_path = base / "profile.json"
    prof_path.write_text(json.dumps(prof, default=float))
    entry = {"arch": arch, "layers": config["num_hidden_layers"], "calibrate_s": time.perf_counter() - t,
             "profile": prof, "shape": json.loads(shape.model_dump_json()), "accelerate": [], "airllm": [],
             "host_gbps": host_gbps()}  # the host's CPU speed after calibration; each Accelerate run records its own
    log(arch, "calibrated", f"{entry['calibrate_s']:.0f}s")
    return ckpt, shape, config, load_machine(str(prof_path)), entry


# (label, GPU budget, CPU budget or None for 100 GiB, batch, prompt), as shares of the model's bytes
RUNSETS = {
    # GPU budgets of 150%, 60% and 30% of the model (and 30% with 20% in RAM, the rest on disk), batch 1 and 4
    "base": [("all GPU", 1.5, None, 1, 128), ("GPU 60%", 0.6, None, 1, 128), ("GPU 60%", 0.6, None, 4, 512),
             ("GPU 30%", 0.3, None, 1, 128), ("GPU 30%", 0.3, None, 4, 128), ("GPU 30%, CPU 20%", 0.3, 0.2, 1, 128)],
    # the calibration runs of peers_report.py, then disk offload: all on disk, part on disk (CPU execution, as
    # nothing lands on the GPU at 30%), and part on disk with GPU execution (60%), batch 1 and 4
    "disk": [("all GPU", 1.5, None, 1, 128), ("GPU 60%", 0.6, None, 1, 128), ("GPU 30%", 0.3, None, 1, 128),
             ("GPU 30%, CPU 20%", 0.3, 0.2, 1, 128), ("GPU 30%, CPU 20%", 0.3, 0.2, 4, 128),
             ("GPU 30%, CPU 50%", 0.3, 0.5, 1, 128), ("GPU 30%, CPU 75%", 0.3, 0.75, 1, 128),
             ("GPU 60%, CPU 20%", 0.6, 0.2, 1, 128), ("GPU 60%, CPU 20%", 0.6, 0.2, 4, 128)],
    "none": []}  # AirLLM only


def accelerate_runs(entry: dict, ckpt: Path, vocab: int, total: int, new_tokens: int, dev: str, sync, deadline: float,
                    save, runset: str = "base", rounds: int = 1) -> None:
    """Accelerate's own device map at the budgets of RUNSETS[runset], the set run `rounds` times in turn (the host's
    speed moves between runs minutes apart: lab/journal/peers.md, twenty-fifth session)."""
    gpu = 0 if dev == "cuda" else "cpu"
    for round_, (label, g, c, batch, p) in itertools.product(range(rounds), RUNSETS[runset]):
        if time.perf_counter() > deadline:
            entry["accelerate"].append({"label": label, "skipped": "deadline"})
            continue
        max_memory = {gpu: int(g * total), "cpu": int(c * total) if c else RAM}
        try:
            host = host_gbps()
            res = accelerate_run(ckpt, ckpt.parent, vocab, "auto", max_memory, batch, p, new_tokens, dev, sync)
            res.update(label=label, batch=batch, prompt=p, max_memory={str(k): v for k, v in max_memory.items()},
                       host_gbps=host, round=round_)
            entry["accelerate"].append(res)
            log(entry["arch"], "accelerate", label, f"b{batch} p{p}",
                f"ttft {res['ttft_s']:.3f} tpot {res['time_per_token_s']:.4f}", f"load {res['load_s']:.1f}s",
                sorted(set(res["hf_device_map"].values())))
        except Exception as exc:
            entry["accelerate"].append({"label": label, "error": f"{type(exc).__name__}: {exc}",
                                        "trace": traceback.format_exc()[-1500:]})
            log(entry["arch"], "accelerate", label, "FAILED", exc)
        save()


def exported_run(entry: dict, ckpt: Path, shape, machine, vocab: int, new_tokens: int, dev: str, sync,
                 share: float = 0.3, round_: int = 0) -> None:
    """The planner's plan for Accelerate at a GPU budget of `share` of the weights, exported and loaded by
    transformers as exported; `round_` numbers the repetitions (run_arch interleaves them)."""
    from sim.plan import Workload
    w = Workload(batch=1, prompt_tokens=128, new_tokens=new_tokens)
    label = f"exported plan, GPU {share:.0%}"
    try:
        exp = exported_plan(shape, machine, w, int(share * shape.total_bytes), RAM)
        dm = {k: (int(v) if isinstance(v, int) or str(v).isdigit() else v) for k, v in exp["export"]["device_map"].items()}
        mm = {0: exp["export"]["max_memory"][0] if 0 in exp["export"]["max_memory"] else exp["export"]["max_memory"]["0"],
              "cpu": exp["export"]["max_memory"]["cpu"]}
        host = host_gbps()
        res = accelerate_run(ckpt, ckpt.parent, vocab, dm, mm, 1, 128, new_tokens, dev, sync)
        res.update(label=label, batch=1, prompt=128, exported=exp, host_gbps=host, round=round_)
        entry["accelerate"].append(res)
        log(entry["arch"], label, f"round {round_}",
            f"predicted {exp['predicted_tpot_s']:.4f} measured {res['time_per_token_s']:.4f}")
    except Exception as exc:
        entry["accelerate"].append({"label": label, "error": f"{type(exc).__name__}: {exc}",
                                    "trace": traceback.format_exc()[-1500:]})
        log(entry["arch"], label, "FAILED", exc)


def run_arch(spec: str, work: Path, out: dict, save, new_tokens: int, dev: str, deadline: float,
             runset: str = "base", airllm: bool = True, export_shares: tuple[float, ...] = (0.3,),
             export_rounds: int = 1, accelerate_rounds: int = 1) -> None:
    """One architecture: calibrate, then Accelerate's own maps, the exported plans (`export_rounds` interleaved
    rounds of every share: the host's speed moves between runs minutes apart, lab/journal/peers.md), and AirLLM warm, cold
    and at batch 4, each run recorded as it ends."""
    ckpt, shape, config, machine, entry = prepare(spec, work, dev)
    out["archs"].append(entry)
    save()
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    vocab = config["vocab_size"]
    accelerate_runs(entry, ckpt, vocab, shape.total_bytes, new_tokens, dev, sync, deadline, save, runset,
                    accelerate_rounds)
    for round_ in range(export_rounds):
        for share in export_shares if runset != "none" else ():
            if time.perf_counter() < deadline:
                exported_run(entry, ckpt, shape, machine, vocab, new_tokens, dev, sync, share, round_)
                save()
    if airllm and time.perf_counter() < deadline:
        try:
            entry["airllm"] = airllm_in_fresh_process(ckpt, vocab, [(1, 128, False), (4, 128, False), (1, 128, True)],
                                                      new_tokens, dev)
        except Exception as exc:
            entry["airllm"] = [{"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-1500:]}]
            log(entry["arch"], "airllm FAILED", exc)
        save()
    shutil.rmtree(ckpt.parent, ignore_errors=True)


def shares(text: str) -> tuple[float, ...]:
    """--export-shares: comma-separated shares of the weights, each in (0, 1.5]."""
    try:
        out = tuple(float(x) for x in text.split(",") if x)
    except ValueError:
        out = ()
    if not out or not all(0 < x <= 1.5 for x in out):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of shares; give e.g. 0.2,0.3,0.45")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default="llama-8b:8,qwen3-4b:12", help="NAME[:LAYERS],...")
    ap.add_argument("--work", default="/tmp/offloadsim-peers")
    ap.add_argument("--out", required=True)
    ap.add_argument("--new-tokens", type=int, default=6)
    ap.add_argument("--budget-s", type=float, default=500, help="start no run after this many seconds")
    ap.add_argument("--probe-hf", action="store_true", help="only the per-token overhead probe of transformers")
    ap.add_argument("--accelerate", choices=sorted(RUNSETS), default="base", help="which Accelerate runs")
    ap.add_argument("--no-airllm", action="store_true", help="skip AirLLM")
    ap.add_argument("--export-shares", type=shares, default=(0.3,),
                    help="GPU budgets of the exported plans, as shares of the weights")
    ap.add_argument("--export-rounds", type=int, choices=range(1, 6), default=1,
                    help="interleaved rounds of the exported plans' runs")
    ap.add_argument("--accelerate-rounds", type=int, choices=range(1, 6), default=1,
                    help="rounds of Accelerate's own maps, run in turn")
    ap.add_argument("--airllm-job", default=None, help=argparse.SUPPRESS)  # the child of airllm_in_fresh_process
    a = ap.parse_args()
    if a.airllm_job:
        return airllm_job(Path(a.airllm_job))
    if a.probe_hf:
        return probe_hf_step(Path(a.out))
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    import accelerate
    import transformers
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv),
              "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu", "torch": torch.__version__,
              "transformers": transformers.__version__, "accelerate": accelerate.__version__, "archs": []}
    try:
        import importlib.metadata as md
        result["airllm"] = md.version("airllm")
    except Exception:
        result["airllm"] = None

    def save():
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=float))
        tmp.replace(out)
    t0 = time.perf_counter()
    for spec in a.archs.split(","):
        try:
            run_arch(spec, Path(a.work), result, save, a.new_tokens, dev, t0 + a.budget_s, a.accelerate,
                     not a.no_airllm, a.export_shares, a.export_rounds, a.accelerate_rounds)
        except Exception as exc:
            result["archs"].append({"arch": spec, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]})
            log(spec, "FAILED", exc)
        save()
    log("done")


def probe_hf_step(out_path: Path, layers: int = 2) -> None:
    """Where the ~60 ms per generated token of a fully GPU-resident transformers model goes (peers-a.json): the same
    model timed through generate with and without the stamping processor, through a plain forward loop with a
    DynamicCache, and one generate under torch.profiler (top CPU ops)."""
    from transformers import AutoModelForCausalLM, DynamicCache
    from validate.checkpoint import make_checkpoint, make_config
    cfg = make_config("llama-3.1-8b", num_hidden_layers=layers)
    cfg.pop("rope_scaling", None)
    ckpt = Path("/tmp/offloadsim-peers/probe")
    shutil.rmtree(ckpt, ignore_errors=True)
    make_checkpoint(cfg, ckpt, device="cuda")
    res = {"torch_threads": torch.get_num_threads()}
    for label, kw in (("device_map auto", dict(device_map="auto")), ("plain .to(cuda)", {})):
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16, **kw)
        if not kw:
            model = model.to("cuda")
        ids = prompt(cfg["vocab_size"], 1, 128, "cuda")
        r = {}
        with torch.no_grad():
            timed_generate(model, ids[:, :8], 2, torch.cuda.synchronize)
            r["stamped"] = timed_generate(model, ids, 6, torch.cuda.synchronize)["time_per_token_s"]
            torch.cuda.synchronize()
            t = time.perf_counter()
            model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            r["generate_total_s"] = time.perf_counter() - t
            cache = DynamicCache()
            out = model(ids, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(5):
                out = model(nxt, past_key_values=out.past_key_values, use_cache=True)
                nxt = out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            r["forward_loop_per_token_s"] = (time.perf_counter() - t) / 5
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                model.generate(ids, max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=0)
                torch.cuda.synchronize()
            r["profile_top_cpu"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
        res[label] = r
        log("hf probe", label, {k: v for k, v in r.items() if k != "profile_top_cpu"})
        print(r["profile_top_cpu"], flush=True)
        del model
        torch.cuda.empty_cache()
    out_path.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
