"""llama.cpp's placement by `-ngl` and `--n-cpu-moe` (what its layer offload puts where)."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.costs.memory import PlanError, check_plan, memory_use, shortfall
from sim.costs.tiers import tier_row
from sim.engines.common import OFFLOAD_MIN_TOKENS, blocks_of, host_tiers, make_plan
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload

                        # (ggml-cuda.cu: ggml_backend_cuda_device_offload_op, min_batch_size = 32)


def llamacpp_layout(model: ModelShape, machine: MachineSpec, budgets: Budgets, ngl: int, n_cpu_moe: int = 0,
                    mapped: bool = True, cpu_expert_blocks=None, reserve: int = 0) -> Plan:
    """llama.cpp with `-ngl ngl`, its GPU memory not checked (llamacpp_ngl checks it): ngl 1 puts only the output
    head on the GPU, n_blocks + 1 everything but the embedding; `--n-cpu-moe n_cpu_moe` keeps the routed experts of
    the first n_cpu_moe blocks on the CPU whatever -ngl says (the shared experts stay with their block). `mapped`:
    its default, the CPU's weights are the mapped model file (pageable); with --load-mode none (older builds:
    --no-mmap) it reads them into its GPU's host buffer type, pinned (llama-model-loader.cpp: "avoid using a host
    buffer when using mmap"; CUDA_Host), so a prefill that multiplies them on the GPU copies them at the pinned speed
    (lab/data/peers/llamacpp-{ad,ae}.json). `cpu_expert_blocks`, where given, names the blocks whose routed experts stay
    on the CPU instead of n_cpu_moe's first ones (as --fit's -ot rules do). The mapped file's CPU weights fill the
    RAM budget less `reserve` bytes, in model order; the rest stay in the file, read from storage at every use (the
    page cache holds what the RAM leaves: disk_raw computed on the CPU), which is how llama.cpp runs a model larger
    than RAM. Raises PlanError when unmapped weights outgrow the pinned budget."""
    blocks = set(range(n_cpu_moe) if cpu_expert_blocks is None else cpu_expert_blocks)
    cpu_experts = {u.name for u in model.units if u.kind == "expert" and u.block in blocks}
    groups = [[n for n in g if n not in cpu_experts] for g in blocks_of(model)]
    order = [groups[-1], *groups[1:-1][::-1]]  # llama.cpp's layers from the back: the output, then the blocks
    on_gpu = {n for g in order[:ngl] for n in g}
    cpu_names = [u.name for u in model.units if u.name not in on_gpu]
    tiers = host_tiers(model, cpu_names, budgets, reserve, not mapped)  # mmap: nothing pinned
    if not mapped and not all(tier_row(tiers[n]).pinned_home for n in cpu_names):
        pinned = sum(model.unit(n).nbytes for n in cpu_names)
        flag, room = min(("--pinned", budgets.pinned_bytes), ("--ram", budgets.ram_bytes), key=lambda f: f[1])
        raise PlanError(f"llama.cpp --load-mode none pins its CPU weights ({pinned / 2**30:.2f} GiB) but the "
                        f"{flag[2:]} budget is {room / 2**30:.2f} GiB; raise {flag} or keep the mapped file")
    tiers.update({n: "vram" for n in on_gpu})
    return make_plan(model, machine, "llamacpp", tiers, {n: "cpu" for n in cpu_names}, prefetch_depth=0,
                     overlap_copy=False, vram_slots=1, pinned_slots=0, pinned_staging=False,
                     gpu_offload_min_tokens=OFFLOAD_MIN_TOKENS, engine="llamacpp")


def llamacpp_ngl(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets, ngl: int,
                 n_cpu_moe: int = 0, mapped: bool = True, cpu_expert_blocks=None) -> Plan:
    """llamacpp_layout, checked against the budgets for `w` (the GPU's memory as llama.cpp uses it,
    sim/engines/llamacpp/ggml_memory.py), with RAM kept for its CPU layers' KV cache where the mapped weights would
    fill it; raises PlanError when it does not fit."""
    plan = llamacpp_layout(model, machine, budgets, ngl, n_cpu_moe, mapped, cpu_expert_blocks)
    m = memory_use(model, plan, w, budgets)
    if mapped and shortfall(m, budgets) == "ram":  # the CPU layers' KV cache beside the mapped weights in RAM
        plan = llamacpp_layout(model, machine, budgets, ngl, n_cpu_moe, mapped, cpu_expert_blocks,
                               m.host_kv_bytes + m.pinned_bytes)
    check_plan(model, plan, w, budgets)
    return plan
