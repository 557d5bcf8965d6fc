"""AirLLM as a plug-in engine."""
from __future__ import annotations

from hwmodels.units import InputError
from sim.engines.airllm.cleanup import module_cleanup
from sim.engines.airllm.costs import AirllmCosts
from sim.engines.airllm.fitting import FITTING
from sim.engines.airllm.placement import airllm
from sim.engines.airllm.pricing import AirllmPricing
from sim.engines.base import Engine


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
    calibration_method = "its cleanup after each module in a fresh process (sim/engines/airllm/cleanup.py)"

    def policies(self) -> dict:
        return {"airllm": airllm}

    def best_plan(self, model, machine, w, budgets, objective: str = "token"):
        """Nothing to choose: every layer re-read every token."""
        return airllm(model, machine, w, budgets)

    def calibrate(self, folder, config: dict, quick: bool) -> tuple[dict, dict]:
        got = module_cleanup(config, folder)
        # a failed measurement keeps the preset's value (the error is in the measurements)
        return {"module_cleanup": got}, ({"load_unit_s": got["cleanup_s"]} if "cleanup_s" in got else {})

    def export(self, model, plan, w, machine, budgets) -> dict:
        raise InputError("export: AirLLM takes no placement (it re-reads every layer from disk each token); drop "
                         "--export.")


ENGINE = AirllmEngine()
