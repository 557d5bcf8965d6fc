"""llama.cpp as a plug-in engine."""
from __future__ import annotations

from sim.costs.memory import PlanError
from sim.engines.base import Engine, RunRef
from sim.engines.llamacpp.costs import LlamacppCosts
from sim.engines.llamacpp.derived import costs_for
from sim.engines.llamacpp.export import to_llamacpp
from sim.engines.llamacpp.fitting import FITTING
from sim.engines.llamacpp.ggml_memory import ggml_compute_bytes, ggml_kv_bytes, ggml_largest_copy
from sim.engines.llamacpp.placement import llamacpp
from sim.engines.llamacpp.planning import best_llamacpp
from sim.engines.llamacpp.pricing import LlamacppPricing

GiB = 2**30


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


class LlamacppEngine(Engine):
    name = "llamacpp"
    label = "llama.cpp"
    rank = 2
    policy_rank = 3
    costs_model = LlamacppCosts
    fitting = FITTING
    unmeasured_source = (
        'llama.cpp: -ngl placement (src/llama-model.cpp), CPU compute of the other layers on the mapped file,'
        " CUDA graphs for the GPU's share (GGML_CUDA_GRAPHS, on by default); costs not measured on this "
        'machine')
    pricing_class = LlamacppPricing
    exports = True
    export_form = "llama.cpp -ngl/-ot arguments"
    computes_rest_on_cpu = True
    kv_homes = ("vram", "cpu")  # -nkvo: the cache in RAM, attention on the CPU
    default_placement = "its default --fit placement (as many layers on the GPU as fit)"

    def costs_for(self, machine):
        return costs_for(machine)

    def policies(self) -> dict:
        return {"llamacpp": llamacpp}

    def gpu_memory(self, model, plan, w) -> tuple:
        """llama.cpp's use of the GPU (sim/engines/llamacpp/ggml_memory.py): its staging is the compute buffer, with
        the activations in it, and its KV cache only that of its GPU layers."""
        return (ggml_compute_bytes(model, plan, w), ggml_kv_bytes(model, plan, w), 0, ggml_largest_copy(model, plan, w),
                ggml_kv_bytes(model, plan, w, "cpu"))

    def refuse_vram(self, m, plan, budgets) -> None:
        raise PlanError(f"vram: llama.cpp needs {_gib(m.vram_bytes)} of GPU memory for this placement but the budget "
                        f"is {_gib(budgets.vram_bytes)}: weights {_gib(m.resident_vram_bytes)} + KV cache of its GPU "
                        f"layers {_gib(m.kv_bytes)} + compute buffer {_gib(m.staging_vram_bytes)}; " +
                        ("raise --vram or keep fewer layers on the GPU." if m.resident_vram_bytes else
                         f"raise --vram: for steps of {plan.gpu_offload_min_tokens} tokens or more its compute "
                         "buffer holds a copy of the largest CPU-held weight beside the logits."))

    def best_plan(self, model, machine, w, budgets, objective: str = "token"):
        return best_llamacpp(model, machine, w, budgets, objective)

    def plan_notes(self, model, machine, plan, costs) -> list[str]:
        if not any(p.compute == "gpu" for p in plan.placements):
            return []
        return [f"priced as a llama.cpp build {'with' if costs.flash_attention else 'without'} its CUDA "
                "flash-attention kernels (llama.cpp's default has them); for the other, set flash_attention = "
                f"{str(not costs.flash_attention).lower()} under [{machine.name}.peers.llamacpp]"]

    def how_to_run(self, ref: RunRef) -> tuple[list[str], str]:
        export = self.export(ref.model, ref.plan, ref.w, ref.machine, ref.budgets)
        weights = ref.weights("gguf")
        notes = [n.rstrip(".") for n in export["notes"]] + ([f"MODEL.gguf: the model as a GGUF file in {ref.model.weight_format.name}"]
                                         if weights == "MODEL.gguf" else [])
        return [export["command"].replace("MODEL.gguf", weights)], "; ".join(notes)

    def measure_hint(self) -> str:
        return ("; measure them with offloadsim calibrate-peer MODEL.gguf --bench BENCH.json --profile MACHINE (the "
                "--machine given here), BENCH.json from llama-bench -m MODEL.gguf -ngl 0 -n 32 -o json on this machine")

    def export(self, model, plan, w, machine, budgets) -> dict:
        return to_llamacpp(model, plan, w, machine.cpu.cores)


ENGINE = LlamacppEngine()
