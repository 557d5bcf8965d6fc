"""llama.cpp's own placement, `--fit` (on by default in llama-cli and llama-server), for one GPU: a port of the search
common/fit.cpp (common_params_fit_impl) over the memory its dry runs measure, here sim/engines/llamacpp/ggml_memory.py's.

Layers are llama.cpp's: the blocks 0..n-1 and the output, index n; `n_layer` of them from the back go to the GPU.
On an MoE the last `n_part` of those are partial: their routed experts stay in system memory. The index range of
the partial layers includes the output's, which has no experts, so a layout of every layer with every block but
the output partial (n_part = n_layer - 1, fit.cpp's "dense-only" layers) keeps the first GPU block's experts on the
GPU: llama-fit-params' own trace (lab/data/peers/llamacpp-{aj,ak}.json) measured those layouts so, and on a shape whose
one block's experts outgrow the budget (a Mixtral-like 4 x 2.8 GB) --fit placed the output alone (-ngl 1) where every
layer with its experts on the CPU would fit.
"""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.plan import Budgets, Plan, Workload
from sim.model.shapes import ModelShape
from sim.costs.memory import PlanError, memory_use
from sim.engines.llamacpp.layout import llamacpp_layout

# which of a partial layer's three expert tensors the first partial layer keeps on the GPU (fit.cpp's
# LAYER_FRACTION_*: UP keeps ffn_up, GATE ffn_gate and ffn_up, MOE and ATTN none)
KEPT_THIRDS = {"moe": 0, "attn": 0, "up": 1, "gate": 2}


def _step(delta: int, target: int, low: int, high: int) -> int:
    """fit.cpp's false-position step: delta * (target - low) / (high - low) in 64-bit integers (truncated), kept as
    an unsigned 32-bit count (a negative value wraps to a large one), then clamped to 1..delta-1."""
    num, den = delta * (target - low), high - low
    q = abs(num) // abs(den) * (1 if (num >= 0) == (den > 0) else -1) if den else 0
    return min(max(q % 2**32, 1), delta - 1)


def fit_placement(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                  mapped: bool = True) -> tuple[Plan, dict]:
    """The plan llama.cpp's --fit places for `w`'s context within budgets.vram_bytes (its free memory less the
    margin), and the layout it chose: {"n_layer", "n_part", "overflow"} (overflow: what the first partial layer
    keeps on the GPU besides its attention; the plan holds that layer's experts on the CPU whatever it keeps, as the
    plan's units are whole experts). As fit.cpp: fill layers back to front (false position between none and all,
    every block but the first partial on an MoE); on an MoE whose layers fit with every routed expert on the CPU,
    turn partial layers full from the front while they fit, then try part of one more."""
    n, moe, target = model.n_blocks, model.is_moe, budgets.vram_bytes
    made: dict = {}

    def plan_of(layers: int, part: int, cpu_blocks=None) -> Plan:
        # the partial layers are the last `part` of the GPU range (fit.cpp: il0 + n_full), the output's index n last
        blocks = range(n + 1 - part, n) if cpu_blocks is None else cpu_blocks
        return llamacpp_layout(model, machine, budgets, layers, cpu_expert_blocks=blocks, mapped=mapped)

    def mem(layers: int, part: int, overflow: str = "moe", cpu_blocks=None) -> int:
        key = (layers, part, overflow, None if cpu_blocks is None else tuple(cpu_blocks))
        if key not in made:
            try:
                m = memory_use(model, plan_of(layers, part, cpu_blocks), w, budgets).vram_bytes
            except PlanError:
                m = 2**62
            first = n + 1 - part  # the first partial layer's block, if it is one
            # what it keeps, in thirds of its routed experts (equal tensors: a Q4_K_M file's ffn_down is larger);
            # fit.cpp's patterns also move its router and shared expert, which this leaves on the GPU
            if overflow in ("up", "gate") and first < n:
                experts = sum(u.nbytes for u in model.units if u.kind == "expert" and u.block == first)
                m += experts * KEPT_THIRDS[overflow] // 3
            made[key] = m
        return made[key]

    # step 1: dense (or dense-only) layers back to front
    low, high = (0, 0), (n + 1, n if moe else 0)
    if mem(*high) <= target:
        low = high
    else:
        while high[0] - low[0] > 1:
            delta = high[0] - low[0]
            step = _step(delta, target, mem(*low), mem(*high))
            test = (low[0] + step, (low[1] + (step - 1 if low[1] == 0 else step)) if moe else 0)
            if mem(*test) <= target:
                low = test
            else:
                high = test
    layers, part, overflow = low[0], low[1], "moe"
    surplus = target - mem(n + 1, 0, cpu_blocks=list(range(n))) if moe else 0  # every routed expert on the CPU
    if moe and surplus > 0 and layers > 0:
        # step 4: partial layers made full from the front while they fit
        high = (layers, 0)
        if mem(*high) > target:
            full_low, full_high = layers - part, layers
            while full_high - full_low > 1:
                step = _step(full_high - full_low, target, mem(layers, layers - full_low),
                             mem(layers, layers - full_high))
                test = full_low + step
                if mem(layers, layers - test) <= target:
                    full_low = test
                else:
                    full_high = test
            part = layers - full_low
        else:
            part = 0
        if layers > 1:  # part of one more layer: its up (then gate) tensor, or at least its attention
            if mem(layers, part, "up") < target:
                overflow = "gate" if mem(layers, part, "gate") < target else "up"
            elif mem(layers, part, "attn") < target:
                overflow = "attn"
    return plan_of(layers, part), {"n_layer": layers, "n_part": part, "overflow": overflow}
