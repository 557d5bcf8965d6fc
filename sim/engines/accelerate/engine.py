"""Accelerate (transformers' device_map) as a plug-in engine."""
from __future__ import annotations

from sim.engines.accelerate.costs import AccelerateCosts
from sim.engines.accelerate.derived import costs_for
from sim.engines.accelerate.disk_cost import offload_open
from sim.engines.accelerate.export import to_accelerate
from sim.engines.accelerate.fitting import FITTING
from sim.engines.accelerate.hook_cost import hook_module_s
from sim.engines.accelerate.placement import accelerate
from sim.engines.accelerate.planning import best_accelerate_map
from sim.engines.accelerate.pricing import AcceleratePricing
from sim.engines.accelerate.snippet import accelerate_snippet
from sim.engines.base import Engine, RunRef


class AccelerateEngine(Engine):
    name = "accelerate"
    label = "Accelerate"
    rank = 1
    policy_rank = 2
    costs_model = AccelerateCosts
    fitting = FITTING
    unmeasured_source = (
        'Accelerate hooks.py (AlignDevicesHook): blocking pageable copies per module, disk offload through '
        'np.memmap (utils/offload.py); costs not measured on this machine')
    pricing_class = AcceleratePricing
    exports = True
    export_form = "an Accelerate device_map"
    default_placement = 'device_map="auto" (what transformers does with no plan)'
    calibration_method = ("each tensor's safetensors open per forward, as a line in its file's header entries "
                          "(sim/engines/accelerate/disk_cost.py); its offload hooks per module "
                          "(sim/engines/accelerate/hook_cost.py)")

    def costs_for(self, machine):
        return costs_for(machine)

    def policies(self) -> dict:
        return {"accelerate": accelerate}

    def best_plan(self, model, machine, w, budgets, objective: str = "token"):
        return best_accelerate_map(model, machine, w, budgets, objective)

    def calibrate(self, folder, config: dict, quick: bool) -> tuple[dict, dict]:
        tensor_s, entry_s = offload_open(folder)
        hooks = hook_module_s(folder, rounds=3 if quick else 8)
        values = {"disk_tensor_s": tensor_s, "disk_header_entry_s": entry_s}
        if "hook_module_s" in hooks:  # else (accelerate not installed) the preset's value stays
            values["hook_module_s"] = hooks["hook_module_s"]
        return {"accelerate_offload_open": {"tensor_s": tensor_s, "header_entry_s": entry_s},
                "accelerate_hooks": hooks}, values

    def export(self, model, plan, w, machine, budgets) -> dict:
        return to_accelerate(model, plan, w, budgets.vram_bytes, budgets.ram_bytes)

    def how_to_run(self, ref: RunRef) -> tuple[list[str], str]:
        weights = ref.weights("hf")
        export = self.export(ref.model, ref.plan, ref.w, ref.machine, ref.budgets)
        notes = [n.rstrip(".") for n in export["notes"]] + ([f"replace {weights} with the model's Hugging Face id or folder"]
                                         if weights == "CHECKPOINT" else [])
        return accelerate_snippet(export, weights, ref.w.new_tokens), "; ".join(notes)


ENGINE = AccelerateEngine()
