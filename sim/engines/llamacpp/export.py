"""llama.cpp's export of a plan: -ngl, --n-cpu-moe and -ot arguments and the runtime's. Where llama.cpp cannot
express a placement (streaming, per-expert tiers) the export takes the nearest one and says so in `notes`."""
from __future__ import annotations

import re
import shlex

from hwmodels.units import InputError
from sim.costs.tiers import tier_row
from sim.plan import Plan, Workload
from sim.model.shapes import ModelShape

LLAMACPP_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3")
# a block's routed experts in a GGUF, as llama.cpp's own --n-cpu-moe matches them (common/common.h,
# LLM_FFN_EXPS_REGEX: fused gate_up and per-channel 'chexps' tensors too), after '^blk\.N\.'
EXPERT_TENSORS = r"ffn_(up|down|gate|gate_up)_(ch|)exps"
# the first llama.cpp build known to take each flag the export writes (its pull request and where the build is known)
FLAG_SINCE = {
    "-ot": (5064, "-ot/--override-tensor: PR #11397, merged 2025-04-02; in build b5064"),
    "--n-cpu-moe": (6089, "--n-cpu-moe: PR #15077, release b6089 (2025-08-05)"),
    "--load-mode": (10114, "--load-mode: PR #20834, in build b10114 (2026-07-24); older builds: --no-mmap"),
}


def llamacpp_runtime(workload: Workload | None, threads: int | None) -> tuple[str, list[str]]:
    """The program and the arguments that make llama.cpp run the request the plan was priced for: the context of
    the request's context per sequence (Workload.context_tokens: --context, else its prompt and new tokens; llama.cpp's
    default, -c 0, takes the model's trained context, whose KV cache the plan did not budget), one slot per sequence (llama-server -np; llama-cli runs one), the threads of the CPU the engine's
    costs were measured with, and -fit off (by default llama.cpp changes unset placement and context to fill free
    device memory: common/common.cpp common_fit_params). Several sequences share one KV cache (-kvu): with -np B
    llama.cpp keeps one per sequence unless told, and a plan with layers on both devices then ran 30-50% slower
    than priced (Llama-3B, half the layers on the GPU, 4 and 16 sequences: 62 and 131 ms a step against 47 and 88
    with -kvu; lab/data/peers/llamacpp-n.json)."""
    args = []
    program = "llama-server" if workload is not None and workload.batch > 1 else "llama-cli"
    if workload is not None:
        args += ["-c", str(workload.batch * workload.context_tokens)]
        args += ["-np", str(workload.batch), "-kvu"] if workload.batch > 1 else []
    args += ["-t", str(threads)] if threads else []
    return program, args + ["-fit", "off"]


def to_llamacpp(model: ModelShape, plan: Plan, workload: Workload | None = None, threads: int | None = None) -> dict:
    """{'args': [...], 'ngl': N, 'ot': [...], 'runtime_args': [...], 'command': '...', 'notes': [...]}. CPU-placed
    blocks that are the first ones are left to `-ngl` (llama.cpp's own split: the last N layers, the output counted
    first, on the GPU, each CPU layer with its KV cache in RAM); the routed experts of the blocks right after them,
    to `--n-cpu-moe N` (the experts of blocks 0..N-1 on the CPU; 'n_cpu_moe'); other CPU blocks, expert tensors and
    a CPU head go by anchored -ot rules; CPU weights the plan pins, to --load-mode none. `args` is the placement;
    `runtime_args` the request's context, slots and threads (llamacpp_runtime; --poll 100 where CPU turns come
    between GPU blocks); `command` both, shell-quoted."""
    if model.family not in LLAMACPP_FAMILIES:
        raise InputError(f"export: llama.cpp cannot run a {model.family!r} model; export for accelerate instead "
                         "(--export accelerate).")
    tiers = plan.tiers()
    on_gpu: dict[int, list[bool]] = {}
    experts_gpu: dict[int, list[bool]] = {}
    head_gpu, notes = True, []
    for u in model.units:
        p = tiers[u.name]
        gpu = tier_row(p.tier).resident
        if not gpu and p.compute == "gpu":
            notes.append("llama.cpp does not stream weights: streamed units are computed on the CPU instead.")
        if u.kind == "lm_head":
            head_gpu = gpu
        elif u.kind == "expert":
            experts_gpu.setdefault(u.block, []).append(gpu)
        elif u.kind != "embedding":
            on_gpu.setdefault(u.block, []).append(gpu)
    cpu_blocks = sorted(b for b, flags in on_gpu.items() if not all(flags))
    prefix = next((i for i, b in enumerate(cpu_blocks) if b != i), len(cpu_blocks))  # blocks 0..prefix-1 on the CPU
    # the output and the last blocks on the GPU; none at all when the head stays on the CPU with every block
    ngl = 0 if prefix == model.n_blocks and not head_gpu else model.n_blocks - prefix + 1
    cpu_blocks = cpu_blocks[prefix:]
    cpu_experts = sorted(b for b, flags in experts_gpu.items() if sum(flags) * 2 < len(flags) and b >= prefix
                         and b not in cpu_blocks)
    if any(0 < sum(f) < len(f) for f in experts_gpu.values()):
        notes.append("GGUF stores a layer's experts in one tensor: a block's experts go where most of them are.")
    if cpu_blocks:
        notes.append("blocks sent to the CPU by -ot keep their KV cache and attention on the GPU (their layer is "
                     "offloaded): each crosses between CPU and GPU twice per token.")
    ot = []
    # llama.cpp matches -ot patterns with regex_search: anchor them, or 'output.weight' also hits 'attn_output.weight'
    if cpu_blocks:
        ot.append(f"^blk\\.({'|'.join(map(str, cpu_blocks))})\\.=CPU")
    # the experts of the blocks right after -ngl's CPU ones, as users write it (llama.cpp matches the same tensors;
    # blocks without routed experts, such as DeepSeek's first dense ones, have none to move)
    last = cpu_experts[-1] if cpu_experts else -1
    following = [b for b in range(prefix, last + 1) if b in experts_gpu and b not in cpu_blocks]
    n_cpu_moe = last + 1 if cpu_experts and cpu_experts == following else 0
    if cpu_experts and not n_cpu_moe:
        ot.append(f"^blk\\.({'|'.join(map(str, cpu_experts))})\\.{EXPERT_TENSORS}\\.=CPU")
    if not head_gpu and ngl > 0:
        ot.append("^output(_norm)?\\.weight$=CPU")  # the head unit: the final norm and the output matrix
    args = ["-ngl", str(ngl)] + (["--n-cpu-moe", str(n_cpu_moe)] if n_cpu_moe else [])
    # the plan's CPU weights pinned: llama.cpp reads them into its GPU's pinned host buffers only when it does not
    # map the file (--load-mode none; builds before the option was added: --no-mmap)
    # (all of them: it cannot pin some and map others)
    cpu_pinned = {tier_row(p.tier).pinned_home for p in plan.placements if p.compute == "cpu"}
    args += ["--load-mode", "none"] if cpu_pinned == {True} else []
    if cpu_pinned == {True, False}:
        notes.append("llama.cpp pins all of its CPU weights or none: the plan's pinned ones stay in the mapped file.")
    for rule in ot:
        re.compile(rule.rsplit("=", 1)[0])  # every pattern must be a valid regex
        args += ["-ot", rule]
    program, runtime = llamacpp_runtime(workload, threads)
    if cpu_experts or cpu_blocks:  # the CPU's turns come between the GPU's blocks, several a token
        # between them ggml's CPU threads stop polling and sleep: Qwen3-30B-A3B's layer, --n-cpu-moe 3 and 6, took
        # 5.0 and 8.1 ms a token, 4.2 and 7.4 with --poll 100, as priced (lab/data/peers/llamacpp-af.json)
        runtime += ["--poll", "100"]
    command = f"{program} -m MODEL.gguf " + " ".join(shlex.quote(a) for a in args + runtime)
    if cpu_blocks and any(any(experts_gpu.get(b, ())) for b in cpu_blocks):
        notes.append("llama.cpp computes a block's experts where -ot puts the block: the experts the plan keeps in "
                     f"VRAM in blocks {', '.join(map(str, cpu_blocks))} (whose attention it streams) go to the CPU "
                     "with them.")
    return {"args": args, "ngl": ngl, "n_cpu_moe": n_cpu_moe, "ot": ot, "runtime_args": runtime, "command": command,
            "requires": requires(args), "notes": sorted(set(notes))}


def requires(args: list[str]) -> str:
    """The oldest llama.cpp build known to take every placement flag in `args`, in one sentence."""
    used = [FLAG_SINCE[a] for a in dict.fromkeys(args) if a in FLAG_SINCE]
    if not used:
        return "any llama.cpp build with -ngl."
    build, _ = max(used)
    return f"llama.cpp build b{build} or later ({'; '.join(why for _, why in used)})."
