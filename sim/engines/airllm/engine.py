"""AirLLM as a plug-in engine."""
from __future__ import annotations

from hwmodels.units import InputError
from sim.engines.airllm.cleanup import module_cleanup
from sim.engines.airllm.costs import AirllmCosts
from sim.engines.airllm.derived import costs_for
from sim.engines.airllm.fitting import FITTING
from sim.engines.airllm.placement import airllm
from sim.engines.airllm.pricing import AirllmPricing
from sim.engines.base import Engine, RunRef


class AirllmEngine(Engine):
    name = "airllm"
    label = "AirLLM"
    rank = 3
    policy_rank = 1
    dominated_by_streaming = True  # no copy/compute overlap
    costs_model = AirllmCosts
    fitting = FITTING
    unmeasured_source = (
        'airllm 4.0 airllm_base.py (safetensors load_file maps the layer file, pin_memory copies it, '
        "clean_memory after each layer, as hooks on transformers' own forward and generate); costs not "
        'measured on this machine')
    pricing_class = AirllmPricing
    no_export_why = "it re-reads every layer from disk each token"
    default_placement = "every layer read from disk each token (it takes no placement)"
    calibration_method = "its cleanup after each module in a fresh process (sim/engines/airllm/cleanup.py)"

    def costs_for(self, machine):
        return costs_for(machine)

    def policies(self) -> dict:
        return {"airllm": airllm}

    def best_plan(self, model, machine, w, budgets, objective: str = "token"):
        """Nothing to choose: every layer re-read every token."""
        return airllm(model, machine, w, budgets)

    def calibrate(self, folder, config: dict, quick: bool) -> tuple[dict, dict]:
        got = module_cleanup(config, folder)
        # a failed measurement keeps the preset's value (the error is in the measurements)
        return {"module_cleanup": got}, ({"load_unit_s": got["cleanup_s"]} if "cleanup_s" in got else {})

    def how_to_run(self, ref: RunRef) -> tuple[list[str], str]:
        """AirLLM's own usage (its README): the model split into layer files once, then generate."""
        weights = ref.weights("hf")
        code = ["from airllm import AutoModel",
                f"model = AutoModel.from_pretrained({weights!r})",
                "ids = model.tokenizer(['Hello'], return_tensors='pt').input_ids.cuda()",
                f"out = model.generate(ids, max_new_tokens={ref.w.new_tokens}, use_cache=True)",
                "print(model.tokenizer.decode(out[0]))"]
        return code, (f"replace {weights} with the model's Hugging Face id or folder" if weights == "CHECKPOINT"
                      else "")

    def export(self, model, plan, w, machine, budgets) -> dict:
        raise InputError("export: AirLLM takes no placement (it re-reads every layer from disk each token); drop "
                         "--export.")


ENGINE = AirllmEngine()
