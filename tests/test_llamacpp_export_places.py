"""The llama.cpp export, run as llama.cpp runs it: every GGUF tensor name of the model placed by the exported -ngl,
-ot and --n-cpu-moe (llama.cpp's rules, written out here from its source) lands where the plan puts its unit, for
Mixtral, Qwen3-MoE and DeepSeek-R1 shapes, and Mixtral larger than RAM."""
import re

import pytest

from hwmodels import get_machine
from sim.engines.common import make_plan
from sim.engines.llamacpp.export import to_llamacpp
from sim.engines.llamacpp.layout import llamacpp_layout, llamacpp_ngl
from sim.model.resolve import load_model
from sim.plan import Budgets, Workload

# llama.cpp's tensor names per block (src/llama-arch.cpp): attention and norms, the router, fused routed experts
GQA = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate_inp")
MLA = ("attn_norm", "attn_q_a_norm", "attn_q_a", "attn_q_b", "attn_kv_a_norm", "attn_kv_a_mqa", "attn_kv_b",
       "attn_output", "ffn_norm", "ffn_gate_inp")
EXPERTS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
SHARED = ("ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")
DENSE = ("attn_norm", "attn_q_a", "attn_q_b", "attn_kv_a_mqa", "attn_kv_b", "attn_output", "ffn_norm", "ffn_gate",
         "ffn_up", "ffn_down")
# llama.cpp's own --n-cpu-moe rule for block i (common/common.h, llm_ffn_exps_block_regex)
NCMOE = r"blk\.{i}\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def tensors(model):
    """(GGUF tensor name, the unit of the plan that holds it): every tensor of the model."""
    out = [("token_embd.weight", model.units[0].name), ("output_norm.weight", "lm_head"), ("output.weight", "lm_head")]
    for b in range(model.n_blocks):
        units = [u for u in model.units if u.block == b]
        layer = next(u.name for u in units if u.kind in ("attention", "decoder"))
        if not any(u.kind == "expert" for u in units):
            out += [(f"blk.{b}.{t}.weight", layer) for t in DENSE]
            continue
        names = MLA if model.family.startswith("deepseek") else GQA
        out += [(f"blk.{b}.{t}.weight", layer) for t in names]
        expert = next(u.name for u in units if u.kind == "expert")
        out += [(f"blk.{b}.{t}.weight", expert) for t in EXPERTS]
        shared = next((u.name for u in units if u.kind == "shared-expert"), None)
        out += [(f"blk.{b}.{t}.weight", shared) for t in SHARED] if shared else []
        out += [(f"blk.{b}.exp_probs_b.bias", layer)] if model.family == "deepseek_v3" else []
    return out


def on_gpu_by_llamacpp(model, args: list[str]) -> dict[str, bool]:
    """Each tensor's device as llama.cpp places it: -ngl N puts blocks from n_layer + 1 - N and the output on the GPU
    (src/llama-model.cpp), the embedding never; the overrides (-ot in order, then --n-cpu-moe's rules, as the
    arguments come) are searched in order and the first match wins (regex_search)."""
    ngl = int(args[args.index("-ngl") + 1])
    start = max(model.n_blocks + 1 - ngl, 0)
    rules = []
    for i, a in enumerate(args):
        if a == "-ot":
            pattern, device = args[i + 1].rsplit("=", 1)
            rules.append((pattern, device))
        elif a == "--n-cpu-moe":
            rules += [(NCMOE.format(i=b), "CPU") for b in range(int(args[i + 1]))]
    out = {}
    for name, _ in tensors(model):
        m = re.match(r"blk\.(\d+)\.", name)
        gpu = (int(m.group(1)) >= start) if m else (name.startswith("output") and ngl >= 1)
        for pattern, device in rules:
            if re.search(pattern, name):
                gpu = device != "CPU"
                break
        out[name] = gpu
    return out


def _check(model, plan):
    tiers = plan.tiers()
    placed = on_gpu_by_llamacpp(model, to_llamacpp(model, plan, Workload())["args"])
    wrong = [n for n, unit in tensors(model) if placed[n] != (tiers[unit].tier == "vram")]
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("preset, ngl, ncmoe, machine", [
    ("mixtral-8x7b", 33, 12, "desktop-4090"), ("mixtral-8x7b", 20, 0, "desktop-4090"),
    ("qwen3-235b-a22b", 95, 40, "xeon-4090"), ("deepseek-r1", 62, 61, "desktop-4090")])
def test_exported_ngl_and_ncmoe_place_every_tensor_as_planned(preset, ngl, ncmoe, machine):
    model, m = load_model(preset), get_machine(machine)
    plan = llamacpp_layout(model, m, Budgets.of(m), ngl, ncmoe)
    _check(model, plan)


def test_experts_of_blocks_other_than_the_first_go_by_llamacpps_own_pattern():
    model, m = load_model("qwen3-235b-a22b"), get_machine("xeon-4090")
    plan = llamacpp_layout(model, m, Budgets.of(m), model.n_blocks + 1, cpu_expert_blocks={3, 7, 50})
    out = to_llamacpp(model, plan, Workload())
    assert "ffn_(up|down|gate|gate_up)_(ch|)exps" in out["ot"][0] and out["n_cpu_moe"] == 0
    _check(model, plan)


def test_cpu_blocks_in_the_middle_go_by_anchored_block_rules():
    """Blocks 5 and 9 wholly on the CPU between GPU blocks, and the head on the CPU: 'blk.5.' must not catch
    blk.50-59, nor 'output.weight' attn_output."""
    model = load_model("qwen3-235b-a22b")
    plan = make_plan(model, get_machine("xeon-4090"), "x",
                     {u.name: "ram_pageable" if u.block in (5, 9) or u.kind in ("embedding", "lm_head") else "vram"
                      for u in model.units})
    _check(model, plan)


def test_a_model_larger_than_ram_is_planned_from_the_mapped_file():
    """Mixtral-8x7B at 16 bits (87 GiB) on a 32 GiB laptop: the CPU's weights fill the RAM budget less its CPU
    layers' KV cache, the rest is read from the file at each use (disk_raw computed on the CPU); the export places
    it as planned."""
    model, m = load_model("mixtral-8x7b"), get_machine("rtx3080-laptop")
    b = Budgets.of(m)
    assert model.total_bytes > m.host_memory.capacity_bytes
    plan = llamacpp_ngl(model, m, Workload(), b, model.n_blocks + 1, model.n_blocks)
    tiers = plan.tiers()
    ram = sum(u.nbytes for u in model.units if tiers[u.name].tier == "ram_pageable")
    disk = [u for u in model.units if tiers[u.name].tier == "disk_raw"]
    assert ram <= b.ram_bytes and disk and all(tiers[u.name].compute == "cpu" for u in disk)
    _check(model, plan)
