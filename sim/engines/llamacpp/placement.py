"""llama.cpp's placement as its --fit (on by default) makes it."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.costs.memory import check_plan
from sim.engines.llamacpp.fit import fit_placement
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload


def llamacpp(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """llama.cpp as its --fit (on by default) places a model (sim/engines/llamacpp/fit.py, a port of common/fit.cpp over
    llama.cpp's use of GPU memory, sim/engines/llamacpp/ggml_memory.py). Dense: -ngl N, the output head and the last N-1 blocks on
    the GPU (src/llama-model.cpp: i_gpu_start = n_layer + 1 - N, and the output is layer n_layer), as many as fit;
    the rest computed on the CPU from the memory-mapped model file (llama.cpp's default: pageable page-cache pages,
    or the disk when RAM is short); the token embedding always on the CPU; steps of >= 32 tokens copy CPU weights
    to the GPU. MoE: layers with their routed experts in system memory first, then, where every layer fits so,
    layers made whole from the front. Raises PlanError when even that does not fit the budgets."""
    plan, _ = fit_placement(model, machine, w, budgets)
    check_plan(model, plan, w, budgets)
    return plan
