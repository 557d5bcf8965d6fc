"""llama.cpp measured (issue 11): built from the llama.cpp tree that the llama-cpp-python source package vendors,
with CUDA, and timed with its own `llama-bench` at several `-ngl` values and on the `-ot` plans offloadsim exports,
beside an offloadsim calibration of the same machine, so that `lab/reports/llamacpp_report.py` can predict every
run with the llama.cpp engine model and compare.

Per architecture: a random-weight checkpoint and its `calibrate` (lab/campaigns/h200_peers.py `prepare`), the same
weights written as an F16 GGUF (gguf-py from the same tree; random weights, so the rotary permutation that
convert_hf_to_gguf.py applies to q/k is skipped, and the vocabulary is a placeholder SentencePiece list: llama-bench
feeds random token ids), then
- `llama-bench -ngl N -p P,... -n G -r R -o json` for every N: prompt processing (the time to the first token) and
  G generated tokens from an empty context (the time per token), as llama-bench reports them, page cache warm
  (mmap, llama.cpp's default);
- `offloadsim plan --engine llamacpp --export llamacpp` at two GPU budgets, run as exported (`-ngl 999 -ot ...`).
The build is kept under --root between calls of a warm machine (a second call resumes it).

Build source (here): pip download --no-deps --no-binary=:all: llama-cpp-python==0.3.36, then its vendor/llama.cpp
without models/, docs/, media/, benches/ and .github/ as a tarball (.lcpp/llama.cpp.tar.gz, carried).
Run (H200): python3 lab/campaigns/h200_llamacpp.py --archs llama-8b:14 --out $OUT/llamacpp-a.json
Here: python lab/reports/llamacpp_report.py lab/data/peers/llamacpp-a.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

from lab.campaigns.h200_matrix import log

CMAKE_FLAGS = ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90", "-DGGML_CUDA_FA=OFF", "-DGGML_CUDA_NCCL=OFF",
               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
               "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF", "-DCMAKE_BUILD_TYPE=Release"]
# one sequence (its repetitions), B sequences decoded together, and the placement llama.cpp's --fit chooses
TARGETS = ("llama-bench", "llama-batched-bench", "llama-fit-params")
HF_TO_GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
              "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate": "ffn_gate_inp",
              "mlp.experts.gate_exps": "ffn_gate_exps", "mlp.experts.up_exps": "ffn_up_exps",
              "mlp.experts.down_exps": "ffn_down_exps"}


def build(tarball: Path, root: Path, timeout_s: float, cuda: bool = True, fa: bool = False) -> dict:
    """llama-bench (with CUDA unless told otherwise; `fa`: with its flash-attention kernels, as a default build has
    them, in a build folder of its own); resumes a build left by an earlier call. Returns what happened."""
    src, bdir = root / "llama.cpp", root / ("build-fa" if fa else "build")
    binary = bdir / "bin" / "llama-bench"
    if all((bdir / "bin" / t).exists() for t in TARGETS):
        return {"ok": True, "binary": str(binary), "build_s": 0.0, "resumed": "already built"}
    t = time.perf_counter()
    if not src.exists():
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as tf:
            tf.extractall(root, filter="data")
    log("llama.cpp", "configure")
    flags = CMAKE_FLAGS if cuda else [f for f in CMAKE_FLAGS if "CUDA" not in f]
    flags = [f.replace("-DGGML_CUDA_FA=OFF", "-DGGML_CUDA_FA=ON") if fa else f for f in flags]
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    cfg = subprocess.run(["cmake", "-S", str(src), "-B", str(bdir), *gen, *flags], capture_output=True, text=True)
    if cfg.returncode:
        return {"ok": False, "stage": "configure", "log": (cfg.stdout + cfg.stderr)[-3000:]}
    log("llama.cpp", "build", f"{os.cpu_count()} jobs")
    try:
        b = subprocess.run(["cmake", "--build", str(bdir), "--target", *TARGETS, "-j", str(os.cpu_count())],
                           capture_output=True, text=True, timeout=max(timeout_s - (time.perf_counter() - t), 1))
    except subprocess.TimeoutExpired:
        return {"ok": False, "stage": "build timed out (resumable)", "build_s": time.perf_counter() - t}
    out = {"ok": b.returncode == 0 and all((bdir / "bin" / t).exists() for t in TARGETS), "binary": str(binary),
           "build_s": time.perf_counter() - t,
           "cmake_flags": flags}
    if not out["ok"]:
        out["log"] = (b.stdout + b.stderr)[-3000:]
    log("llama.cpp", "built" if out["ok"] else "BUILD FAILED", f"{out['build_s']:.0f}s")
    return out


def write_gguf(ckpt: Path, config: dict, path: Path, gguf_py: Path, embed_scale: float = 1.0) -> int:
    """The checkpoint's weights as an F16 GGUF (norms F32) of llama.cpp's llama, qwen3 or qwen3moe architecture (its
    routed experts stacked per block into ffn_{gate,up,down}_exps, as convert_hf_to_gguf.py writes them). The token
    embeddings are multiplied by embed_scale: large, each token's own embedding outweighs what attention mixes into
    its hidden state, so an MoE's routers spread a prompt's tokens over the experts as a trained model's do
    (lab/campaigns/moe_routing.py); no time of the run depends on the values otherwise."""
    sys.path.insert(0, str(gguf_py))
    import gguf
    import torch
    from safetensors.torch import load_file
    arch = {"llama": "llama", "qwen3": "qwen3", "qwen3_moe": "qwen3moe"}[config["model_type"]]
    h, heads = config["hidden_size"], config["num_attention_heads"]
    d = config.get("head_dim") or h // heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(8192)
    w.add_embedding_length(h)
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(config.get("num_key_value_heads") or heads)
    w.add_key_length(d)
    w.add_value_length(d)
    w.add_rope_dimension_count(d)
    w.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-5)))
    if arch == "qwen3moe":
        w.add_expert_count(config.get("num_experts") or config["num_local_experts"])  # transformers 4 or 5
        w.add_expert_used_count(config["num_experts_per_tok"])
        w.add_expert_feed_forward_length(config["moe_intermediate_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    v = config["vocab_size"]
    w.add_vocab_size(v)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    types = [2, 3, 3] + [6] * 256
    tokens += [f"\u2581t{i}" for i in range(v - len(tokens))]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * v)
    w.add_token_types(types + [1] * (v - len(types)))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    tensors = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    tensors["model.embed_tokens.weight"] = tensors["model.embed_tokens.weight"] * embed_scale
    for name, t in moe_tensors(tensors).items():
        w.add_tensor(gguf_name(name), t.to(torch.float32 if t.dim() == 1 else torch.float16).numpy())
    # a head tied to the embedding writes no output.weight: llama.cpp then uses token_embd.weight as the head, a copy
    # of it on the head's device (llama-model.cpp: TENSOR_DUPLICATED), as its converter leaves Qwen3-0.6B's GGUF
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.stat().st_size


def moe_tensors(tensors: dict) -> dict:
    """The checkpoint's tensors with each block's routed experts as three stacked tensors, [experts, out, in]:
    from transformers 5's fused mlp.experts.gate_up_proj ([E, 2I, H], gate then up) and down_proj ([E, H, I]), or
    from one mlp.experts.{e}.{gate,up,down}_proj per expert (transformers 4)."""
    import torch
    out, per_expert = {}, {}
    for name, t in tensors.items():
        m = re.fullmatch(r"(model\.layers\.\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight", name)
        if m:
            per_expert.setdefault((m[1], m[3]), {})[int(m[2])] = t
        elif name.endswith(".mlp.experts.gate_up_proj"):
            gate, up = t.chunk(2, dim=1)
            base = name[:-len(".gate_up_proj")]
            out[f"{base}.gate_exps.weight"], out[f"{base}.up_exps.weight"] = gate.contiguous(), up.contiguous()
        elif name.endswith(".mlp.experts.down_proj"):
            out[f"{name[:-len('.down_proj')]}.down_exps.weight"] = t
        else:
            out[name] = t
    for (block, proj), experts in per_expert.items():
        out[f"{block}.mlp.experts.{proj}_exps.weight"] = torch.stack([experts[e] for e in sorted(experts)])
    return out


def gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")  # model.layers.{i}.<module>.weight
    return f"blk.{parts[2]}.{HF_TO_GGUF['.'.join(parts[3:-1])]}.{parts[-1]}"


def bench(binary: str, model: Path, args: list[str], prompts: list[int], gen: int, reps: int) -> list[dict]:
    """llama-bench's JSON records for one setting: a prompt-processing test per prompt length and a generation test."""
    cmd = [binary, "-m", str(model), *args, "-p", ",".join(map(str, prompts)), "-n", str(gen), "-r", str(reps),
           "-o", "json"]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if r.returncode:
        raise RuntimeError(f"llama-bench exited {r.returncode}: {r.stderr[-1500:]}")
    recs = json.loads(r.stdout)
    keep = ("n_prompt", "n_gen", "n_gpu_layers", "n_threads", "avg_ns", "stddev_ns", "samples_ns", "avg_ts",
            "flash_attn", "use_mmap", "n_batch", "n_ubatch", "type_k", "model_size", "model_n_params", "cpu_info",
            "gpu_info", "build_commit", "tensor_buft_overrides", "n_cpu_moe", "load_mode", "no_host")
    out = [{k: rec.get(k) for k in keep} for rec in recs]
    log("llama-bench", " ".join(args), f"{time.perf_counter() - t:.0f}s",
        [f"p{o['n_prompt']} g{o['n_gen']}: {o['avg_ns'] / 1e9:.4f}s" for o in out])
    return [dict(o, args=args) for o in out]


def batched(binary: str, model: Path, args: list[str], batches: list[int], prompt: int, gen: int) -> list[dict]:
    """llama-batched-bench's JSON lines for one placement: B sequences of `prompt` tokens each, then `gen` steps
    that decode one token of every sequence together (t_tg: those steps' seconds), for each B, in one process. It
    times each B once (the rounds repeat it); its own warm-up decodes 16 tokens first."""
    exe = str(Path(binary).with_name("llama-batched-bench"))
    ctx = max(batches) * (prompt + gen) + 256
    cmd = [exe, "-m", str(model), *args, "-c", str(ctx), "-npp", str(prompt), "-ntg", str(gen),
           "-npl", ",".join(map(str, [*batches, 1])), "-t", str(os.cpu_count()), "-tb", str(os.cpu_count()),
           "--output-format", "jsonl"]
    t = time.perf_counter()
    # its logger thread sometimes loses the last line at exit (half the runs of a tiny model on 2 cores, none of
    # calls M-O's on the H200): a last single sequence, not kept, is timed after the batches asked for, and the
    # run is repeated if a line is missing still
    for _ in range(3):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        if r.returncode:
            raise RuntimeError(f"llama-batched-bench exited {r.returncode}: {r.stderr[-1500:]}")
        recs = [json.loads(line) for line in (r.stdout + "\n" + r.stderr).splitlines()
                if line.startswith("{") and '"speed_tg"' in line][:len(batches)]
        if [o["pl"] for o in recs] == list(batches):
            break
    else:
        raise RuntimeError(f"llama-batched-bench reported {len(recs)} of {len(batches)} batches three times: "
                           f"{r.stderr[-800:]}")
    log("llama-batched-bench", " ".join(args), f"{time.perf_counter() - t:.0f}s",
        [f"B{o['pl']}: {o['t_tg'] / gen * 1e3:.2f} ms/step" for o in recs])
    return [dict(o, args=args, n_threads_host=os.cpu_count(), n_seq_max=max(batches)) for o in recs]


def cpu_probe(shots: int = 7) -> dict:
    """The host CPU's speed now: a bf16 matrix-vector product over 1 GiB of weights (more than the last-level
    cache) with every core, as llama.cpp's CPU share streams its weights; seconds of each shot and the median
    speed. Recorded every round, so a slow spell of a shared host shows beside the runs it slowed."""
    import torch
    torch.set_num_threads(os.cpu_count())
    w = torch.ones(2**29 // 4096, 4096, dtype=torch.bfloat16)  # 1 GiB
    x = torch.ones(4096, dtype=torch.bfloat16)
    secs = []
    for _ in range(shots):
        t = time.perf_counter()
        torch.mv(w, x)
        secs.append(time.perf_counter() - t)
    return {"gemv_bytes": w.numel() * 2, "shots_s": secs,
            "gemv_bytes_per_s": w.numel() * 2 / sorted(secs)[len(secs) // 2], "threads": os.cpu_count()}


def host_state(n: int = 5) -> dict:
    """How busy the host is: its load average and the speed of a 1 GiB copy in RAM (n copies: min, median, max), so
    that a run on a contended host shows in the record (a contended host slows llama.cpp's CPU threads unevenly)."""
    import numpy as np
    src = np.ones(2**30, dtype=np.uint8)
    dst = np.empty_like(src)
    speeds = []
    for _ in range(n):
        t = time.perf_counter()
        np.copyto(dst, src)
        speeds.append(2 * src.nbytes / (time.perf_counter() - t))  # read + write
    speeds.sort()
    return {"loadavg": Path("/proc/loadavg").read_text().split()[:3], "copy_bytes_per_s": [speeds[0], speeds[n // 2],
            speeds[-1]]}


def copy_probe(path: Path, sizes_mb: tuple[int, ...] = (8, 32, 128, 512), shots: int = 5) -> dict:
    """The link's pageable copy speed by size, from the memory-mapped GGUF (page cache warm, as llama.cpp's op
    offload copies CPU-held weights) and from anonymous memory: median seconds of `shots` copies per size."""
    import numpy as np
    import torch
    if not torch.cuda.is_available():
        return {"skipped": "no GPU"}
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {"sizes_mb": list(sizes_mb), "mapped_s": [], "anonymous_s": []}
    for mb in sizes_mb:
        n = min(mb << 20, mm.size)
        for key, src in (("mapped_s", torch.from_numpy(np.asarray(mm[mm.size - n:]))),
                         ("anonymous_s", torch.ones(n, dtype=torch.uint8))):
            dst = torch.empty(n, dtype=torch.uint8, device="cuda")
            secs = []
            for _ in range(shots):
                torch.cuda.synchronize()
                t = time.perf_counter()
                dst.copy_(src)
                torch.cuda.synchronize()
                secs.append(time.perf_counter() - t)
            out[key].append(sorted(secs)[shots // 2])
            del dst
    log("copy probe", {k: [f"{(m << 20) / s / 1e9:.1f} GB/s" for m, s in zip(sizes_mb, v)]
                       for k, v in out.items() if k != "sizes_mb"})
    return out


def sched_debug(binary: str, model: Path, args: list[str], batch: int, prompt: int) -> dict:
    """ggml's scheduler, as it splits one graph of B sequences between the devices (GGML_SCHED_DEBUG=2): each
    split's device and the inputs it copies in, and the device of each attention (FLASH_ATTN_EXT) node, as
    llama-batched-bench logs them (-v), first graphs kept."""
    exe = str(Path(binary).with_name("llama-batched-bench"))
    cmd = [exe, "-m", str(model), *args, "-c", str(batch * (prompt + 4) + 256), "-npp", str(prompt), "-ntg", "2",
           "-npl", str(batch), "-t", str(os.cpu_count()), "-v"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=dict(os.environ, GGML_SCHED_DEBUG="2"))
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "SPLIT" in ln or "FLASH_ATTN" in ln]
    log("sched debug", " ".join(args), f"B{batch}", f"{len(lines)} split lines")
    return {"args": args, "batch": batch, "rc": r.returncode, "split_lines": lines[:600], "n_split_lines": len(lines)}


def counts(text: str) -> tuple[int, ...]:
    """--batches: comma-separated sequence counts, each >= 1 (empty: none)."""
    try:
        out = tuple(int(x) for x in text.split(",") if x)
    except ValueError:
        out = (0,)
    if not all(x >= 1 for x in out):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of sequence counts; give e.g. 1,4,16")
    return out


def fractions(text: str) -> tuple[float, ...]:
    """--batch-ngl-shares, --export-batch-shares: comma-separated shares in [0, 1.5] (empty: none)."""
    try:
        out = tuple(float(x) for x in text.split(",") if x)
    except ValueError:
        out = (-1.0,)
    if not all(0 <= x <= 1.5 for x in out):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of shares; give e.g. 0,0.5,1.1")
    return out


def arg_list(text: str) -> list[str]:
    """--batch-extra: llama-batched-bench arguments as a shell would split them, each an option or its value."""
    try:
        out = shlex.split(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of arguments ({exc}); give e.g. '-kvu -fa on'")
    if not out or not out[0].startswith("-"):
        raise argparse.ArgumentTypeError(f"{text!r} does not start with an option; give e.g. '-kvu --no-op-offload'")
    return out


def host_info() -> dict:
    """The host CPU as the OS reports it: lscpu's summary and each cache level's size (a CPU share whose weights fit
    the last-level cache streams faster than memory)."""
    caches = {}
    for d in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            caches[d.name] = {k: (d / k).read_text().strip() for k in ("level", "type", "size", "shared_cpu_list")}
        except OSError:
            continue
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True) if shutil.which("lscpu") else None
    return {"lscpu": lscpu.stdout if lscpu else "", "caches": caches, "nproc": os.cpu_count()}


def exported(shape, machine, fraction: float, gen: int, batch: int = 1, prompt: int = 1) -> dict:
    """`plan --engine llamacpp --export llamacpp` with a GPU budget of `fraction` of the weights, for `batch`
    sequences of `prompt` tokens each."""
    from planner.engines import plan_for_engine
    from sim.engines.llamacpp.export import to_llamacpp
    from sim.plan import Budgets, Workload
    w = Workload(batch=batch, prompt_tokens=prompt, new_tokens=gen + 1)
    budgets = Budgets.of(machine, vram=int(fraction * shape.total_bytes))
    rep = plan_for_engine("llamacpp", shape, machine, w, budgets)
    if rep.plan is None:
        raise RuntimeError(rep.reason)
    exp = to_llamacpp(shape, rep.plan, w, machine.cpu.cores)
    return {"fraction": fraction, "batch": batch, "prompt": prompt, "vram_bytes": budgets.vram_bytes,
            "plan": json.loads(rep.plan.model_dump_json()),
            "export": exp, "bench_args": bench_args_of(exp)}


def free_vram_mib() -> int | None:
    """The GPU's free memory now (MiB), as nvidia-smi reports it; None without one."""
    if not shutil.which("nvidia-smi"):
        return None
    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    return int(r.stdout.split()[0]) if r.returncode == 0 and r.stdout.strip() else None


def fit_params(binary: str, model: Path, budget_bytes: int, ctx: int) -> dict:
    """The placement llama.cpp's --fit (on by default in llama-cli and llama-server) chooses when `budget_bytes` of
    the GPU may be used: llama-fit-params with a free-memory margin of the GPU's free memory less the budget
    (-fitt), at a context of `ctx` set by the user (as llama-bench sets it), printing its -ngl and -ot rules;
    its own view of the free memory (log at trace verbosity) kept, so the budget it fitted is known exactly.
    Returns them with llama-bench's spelling of the placement (its -ot rules joined by ';')."""
    exe = str(Path(binary).with_name("llama-fit-params"))
    free = free_vram_mib()
    if free is None:  # without it the margin would fit the whole GPU, not the budget asked for
        raise RuntimeError("nvidia-smi gave no free GPU memory: a budget cannot be set as --fit's margin")
    margin = max(free - budget_bytes // 2**20, 0)
    cmd = [exe, "-m", str(model), "-c", str(ctx), "-fitt", str(margin), "-lv", "4"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("-c ")), None)
    if r.returncode or line is None:
        raise RuntimeError(f"llama-fit-params exited {r.returncode}: {(r.stdout + r.stderr)[-1500:]}")
    words = shlex.split(line)
    value = {w: words[i + 1] for i, w in enumerate(words[:-1])}
    seen = re.findall(r"vs\. (\d+) MiB of free device memory", r.stderr)
    out = {"budget_bytes": budget_bytes, "free_mib_before": free, "margin_mib": margin, "printed": line,
           "fit_free_mib": int(seen[0]) if seen else None, "log": [ln for ln in r.stderr.splitlines()
                                                                   if "MiB" in ln][-120:],
           "bench_args": ["-ngl", value["-ngl"]] + (["-ot", value["-ot"].replace(",", ";")] if "-ot" in value else [])}
    log("llama-fit-params", f"{budget_bytes / 2**30:.1f} GiB", line[:160])
    return out


def bench_args_of(exp: dict) -> list[str]:
    """An exported plan's placement and the runtime arguments that change its speed, in llama-bench's spelling (its
    -ot rules joined by ';', -lm for --load-mode; its context and slots are the tool's own)."""
    value = {a: exp["args"][i + 1] for i, a in enumerate(exp["args"][:-1])}
    rt = exp["runtime_args"]
    return ["-ngl", str(exp["ngl"])] + (["-ncmoe", str(exp["n_cpu_moe"])] if exp.get("n_cpu_moe") else []) \
        + (["-ot", ";".join(exp["ot"])] if exp["ot"] else []) \
        + (["-kvu"] if "-kvu" in rt else []) \
        + (["-lm", value["--load-mode"]] if "--load-mode" in value else []) \
        + (["--poll", rt[rt.index("--poll") + 1]] if "--poll" in rt else [])


def settings_of(a, layers: int, prompts: list[int], exports: list[dict], moe: bool = False) -> list[tuple]:
    """(kind, llama-bench args, prompt lengths, exported plan or None) for every setting of one architecture: the
    -ngl sweep, the thread counts at one -ngl, and each exported plan in its -ngl form and (for a leading CPU run)
    the same placement by -ot, whose layers keep their KV cache on the GPU."""
    if a.ngl_every:  # 0, K, 2K, ... and every layer with the head
        ngls = [str(n) for n in range(0, layers + 1, a.ngl_every)] + [str(layers + 1)]
    elif a.ngl_shares:
        ngls = [str(min(round(float(f) * layers), layers + 1)) for f in a.ngl_shares.split(",")]
    else:
        ngls = a.ngl.split(",")
    out = [("ngl", ["-ngl", n], prompts, None) for n in dict.fromkeys(ngls) if n]  # --ngl "": no sweep
    # every layer on the GPU but the routed experts of the first N blocks (MoE): as a user runs --n-cpu-moe N
    out += [("ngl", ["-ngl", str(layers + 1), "-ncmoe", str(n)], prompts, None)
            for n in dict.fromkeys(min(round(f * layers), layers) for f in a.ncmoe_shares) if moe]
    # the settings that keep weights on the CPU again with other arguments (e.g. -lm none: no mapped file)
    out += [(kind, [*args, *extra], plens, None) for extra in a.variant for kind, args, plens, _ in list(out)
            if "-ncmoe" in args or int(args[1]) <= layers]
    if a.batches:
        shares = [min(round(f * layers), layers + 1) for f in a.batch_ngl_shares]
        kvu = ["-kvu"] if a.batch_kvu else []  # one KV cache shared by the sequences, as --export llamacpp asks for
        out += [("batched", ["-ngl", str(n), *kvu], [], None) for n in dict.fromkeys(shares)]
        if a.batch_kvu_at is not None and not kvu:  # a shared KV cache against one per sequence, at one -ngl
            out.append(("batched", ["-ngl", str(min(round(a.batch_kvu_at * layers), layers + 1)), "-kvu"], [], None))
        out += [("batched", ["-ngl", str(n), *extra], [], None) for extra in a.batch_extra
                for n in dict.fromkeys(shares)]
    at = str(min(round(a.threads_at * layers), layers + 1))
    out += [("threads", ["-ngl", at, "-t", t], [0], None) for t in a.threads.split(",") if t]
    for exp in exports:
        if exp.get("batch", 1) > 1:  # B sequences decoded together: timed by llama-batched-bench
            out.append(("exported_batched", exp["bench_args"], [], exp))
            continue
        out.append(("exported", exp["bench_args"], prompts[:1], exp))
        cpu_first = layers + 1 - int(exp["export"]["ngl"])
        if a.ot and 0 < cpu_first <= layers and not exp["export"]["ot"]:
            rule = f"^blk\\.({'|'.join(map(str, range(cpu_first)))})\\.=CPU"
            out.append(("exported_ot", ["-ngl", "999", "-ot", rule], prompts[:1], exp))
    return out


def run_arch(spec: str, a, binary: str, work: Path, result: dict, save, deadline: float) -> None:
    """One architecture: checkpoint, calibrate, GGUF, the exported plans, then every setting (settings_of) in
    --rounds interleaved rounds, so that a slow spell of a shared host spreads over the settings instead of landing
    on one."""
    from lab.campaigns.h200_peers import prepare
    from sim.model.resolve import load_model
    import torch
    ckpt, _, config, machine, entry = prepare(spec, work, "cuda" if torch.cuda.is_available() else "cpu",
                                              calibrated=not a.no_calibrate)
    entry.update(llamacpp=[], exported=[], embed_scale=a.embed_scale)
    result["archs"].append(entry)
    t = time.perf_counter()
    gguf_path = ckpt.parent / "model-f16.gguf"
    entry["gguf_bytes"] = write_gguf(ckpt, config, gguf_path, Path(a.root) / "llama.cpp" / "gguf-py",
                                    a.embed_scale)
    shutil.rmtree(ckpt, ignore_errors=True)
    shape = load_model(str(gguf_path))
    entry["gguf_shape"] = json.loads(shape.model_dump_json())
    log(spec, "gguf", f"{entry['gguf_bytes'] / 1e9:.2f} GB", f"{time.perf_counter() - t:.0f}s")
    save()
    prompts = [int(p) for p in a.prompts.split(",")]
    layers = config["num_hidden_layers"]
    wanted = [(float(f), 1, 1, a.gen) for f in a.export_shares.split(",") if f]
    wanted += [(f, a.export_batch, a.batch_prompt, a.batch_gen) for f in a.export_batch_shares]
    for fraction, batch, prompt, gen in wanted:
        try:
            plan = exported(shape, machine, fraction, gen, batch, prompt)
            entry["exported"].append(dict(plan, bench=[], bench_ot=[]))
        except Exception as exc:
            entry["exported"].append({"fraction": fraction, "error": f"{type(exc).__name__}: {exc}",
                                      "trace": traceback.format_exc()[-1500:]})
            log(spec, "exported", fraction, "FAILED", exc)
    settings = settings_of(a, layers, prompts, [e for e in entry["exported"] if "error" not in e],
                           "moe_intermediate_size" in config)
    entry["fits"] = []
    for share in a.fit_shares:  # llama.cpp's own placement (--fit) at a GPU budget of this share of the weights
        try:
            fitted = fit_params(binary, gguf_path, int(share * entry["gguf_bytes"]), max(prompts) + a.gen)
            entry["fits"].append(dict(fitted, share=share, bench=[]))
            settings.append(("fit", fitted["bench_args"], prompts[:1], entry["fits"][-1]))
        except Exception as exc:
            entry["fits"].append({"share": share, "error": f"{type(exc).__name__}: {exc}"})
            log(spec, "fit", share, "FAILED", exc)
    entry["host_before"] = host_state()
    entry["probes"] = []
    batches = list(a.batches)
    for rnd in range(a.rounds):
        entry["probes"].append(dict(cpu_probe(), round=rnd))
        for kind, args, plens, exp in settings:
            if time.perf_counter() > deadline:
                entry.setdefault("skipped", []).append({"round": rnd, "args": args})
                continue
            try:
                if kind == "batched" and a.batch_each:  # as llama-server -np B: room for B sequences only
                    recs = [r for b in batches for r in batched(binary, gguf_path, args, [b], a.batch_prompt,
                                                                 a.batch_gen)]
                elif kind == "batched":
                    recs = batched(binary, gguf_path, args, batches, a.batch_prompt, a.batch_gen)
                elif kind == "exported_batched":
                    recs = batched(binary, gguf_path, args, [exp["batch"]], a.batch_prompt, a.batch_gen)
                else:
                    recs = bench(binary, gguf_path, args, plens, a.gen, a.reps)
                recs = [dict(r, round=rnd, kind=kind) for r in recs]
            except Exception as exc:
                recs = [{"args": args, "round": rnd, "kind": kind, "error": f"{type(exc).__name__}: {exc}"}]
                log(spec, *args, "FAILED", exc)
            if exp is None:
                entry["llamacpp"] += recs
            else:
                exp["bench_ot" if kind == "exported_ot" else "bench"] += recs  # an exported plan's, or a fit's
            save()  # after every setting: a call cut short by its time limit keeps what it timed
    entry["host_after"] = host_state()
    if a.copy_probe:
        entry["copy_probe"] = copy_probe(gguf_path)
    for extra in a.sched_debug:
        try:
            ngl = [] if "-ngl" in extra else ["-ngl", "0"]  # -ngl 0 unless the arguments name one
            entry.setdefault("sched_debug", []).append(sched_debug(binary, gguf_path, [*ngl, *extra],
                                                                   max(batches or [32]), a.batch_prompt))
        except Exception as exc:
            entry.setdefault("sched_debug", []).append({"args": extra, "error": f"{type(exc).__name__}: {exc}"})
        save()
    gguf_path.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default="llama-8b:14",
                    help="NAME[:LAYERS],... (a tied head written as llama.cpp's converter writes it)")
    ap.add_argument("--tarball", default=".lcpp/llama.cpp.tar.gz")
    ap.add_argument("--root", default="/var/tmp/offloadsim-llamacpp", help="where the build is kept between calls")
    ap.add_argument("--work", default="/tmp/offloadsim-llamacpp")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ngl", default="0,3,6,9,12,14,15")
    ap.add_argument("--ngl-shares", default=None,
                    help="-ngl as shares of each architecture's layers (1.1: every layer and the head), replaces --ngl")
    ap.add_argument("--prompts", default="128,512")
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ngl-every", type=int, default=0, help="-ngl 0, K, 2K, ... and every layer with the head: "
                    "replaces --ngl")
    ap.add_argument("--ncmoe-shares", type=fractions, default=(), help="also time every layer on the GPU with the "
                    "routed experts of the first N blocks on the CPU (llama-bench -ncmoe N), N as shares of the "
                    "layers: MoE architectures")
    ap.add_argument("--embed-scale", type=float, default=1.0, help="multiply the token embeddings by this (MoE: 200 "
                    "spreads a prompt's tokens over the experts as a trained router does; lab/campaigns/moe_routing.py)")
    ap.add_argument("--variant", type=arg_list, action="append", default=[], help="time the settings that keep "
                    "weights on the CPU (-ngl sweep, -ncmoe) again with these llama-bench arguments added, e.g. "
                    "--variant='-lm none' or --variant='--no-host 1'")
    ap.add_argument("--threads", default="", help="thread counts (-t) to time generation with, at --threads-at")
    ap.add_argument("--threads-at", type=float, default=0.5, help="the -ngl of the --threads runs, as a share of the "
                    "layers")
    ap.add_argument("--export-shares", default="0.35,0.7", help="GPU budgets of the exported plans, as shares of "
                    "the weights")
    ap.add_argument("--ot", action=argparse.BooleanOptionalAction, default=True,
                    help="also run each exported -ngl plan in the -ot form")
    ap.add_argument("--fit-shares", type=fractions, default=(), help="GPU budgets, as shares of the GGUF's bytes, "
                    "to time llama.cpp's own --fit placement at (llama-fit-params, then llama-bench with it)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds over every setting")
    ap.add_argument("--batches", type=counts, default=(), help="sequences decoded together (llama-batched-bench "
                    "-npl), e.g. 1,2,4,8,16; none: no batched runs")
    ap.add_argument("--batch-ngl-shares", type=fractions, default=(0.0, 0.5, 1.1),
                    help="-ngl of the batched runs, as shares of the layers")
    ap.add_argument("--batch-prompt", type=int, default=16, help="prompt tokens of each sequence of a batched run")
    ap.add_argument("--batch-gen", type=int, default=16, help="decode steps timed in a batched run")
    ap.add_argument("--batch-each", action="store_true", help="one llama-batched-bench process per batch (its "
                    "context holds that many sequences, as llama-server -np B), not one for all")
    ap.add_argument("--batch-kvu-at", type=float, default=None, help="also time the batches with one KV cache "
                    "shared by the sequences (-kvu) at this -ngl share")
    ap.add_argument("--batch-kvu", action="store_true", help="every batched run with one KV cache shared by the "
                    "sequences (-kvu)")
    ap.add_argument("--batch-extra", type=arg_list, action="append", default=[],
                    help="also time every batched -ngl with these llama-batched-bench arguments (repeatable), "
                         "e.g. --batch-extra='-kvu --no-op-offload'")
    ap.add_argument("--copy-probe", action="store_true", help="also time the link's pageable copies by size, from "
                    "the mapped GGUF and from anonymous memory")
    ap.add_argument("--sched-debug", type=arg_list, action="append", default=[],
                    help="also log ggml's splits of one graph of the largest batch with these arguments (-ngl 0 "
                         "unless they name one; repeatable), e.g. --sched-debug=-kvu")
    ap.add_argument("--export-batch", type=int, default=4, help="sequences of the --export-batch-shares plans")
    ap.add_argument("--export-batch-shares", type=fractions, default=(), help="GPU budgets of plans exported for "
                    "--export-batch sequences (timed by llama-batched-bench), as shares of the weights")
    ap.add_argument("--no-calibrate", action="store_true", help="skip offloadsim's calibrate (generation only: the "
                    "engine model prices decode from the preset's bandwidth)")
    ap.add_argument("--no-cuda", action="store_true", help="a CPU build: a smoke test on a machine without a GPU")
    ap.add_argument("--fa", action="store_true", help="build with ggml-cuda's flash-attention kernels (llama.cpp's "
                    "default; without them, to build in ~200 s, -fa auto falls back to matrix-multiply attention on "
                    "the GPU)")
    ap.add_argument("--build-timeout-s", type=float, default=450)
    ap.add_argument("--budget-s", type=float, default=520, help="start no llama-bench run after this many seconds")
    a = ap.parse_args()
    if not 0 < a.embed_scale < float("inf"):
        ap.error(f"--embed-scale: {a.embed_scale} is not a positive finite number; give e.g. 1 (as written) or 200")
    t0 = time.perf_counter()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv), "host": host_info(),
              "archs": []}

    def save():
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=float))
        tmp.replace(out)
    result["build"] = build(Path(a.tarball), Path(a.root), a.build_timeout_s, not a.no_cuda, a.fa)
    save()
    if not result["build"]["ok"]:
        log("llama.cpp not built:", result["build"].get("stage"), result["build"].get("log", "")[-800:])
        return
    for spec in a.archs.split(","):
        try:
            run_arch(spec, a, result["build"]["binary"], Path(a.work), result, save, t0 + a.budget_s)
        except Exception as exc:
            result["archs"].append({"arch": spec, "error": f"{type(exc).__name__}: {exc}",
                                    "trace": traceback.format_exc()[-2000:]})
            log(spec, "FAILED", exc)
        save()
    log("done", f"{time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
