"""offloadsim's own streaming engine as a plug-in: the planner (planner/core.py) plans for it."""
from __future__ import annotations

from sim.engines.base import Engine, RunRef
from sim.engines.offloadsim.placement import resident, stream
from sim.engines.offloadsim.pricing import OffloadsimPricing


# the model families its PyTorch engine (validate/model.py) computes, with 16-bit weights; the rest are simulated only
RUNS_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
RUNS_FORMATS = ("bf16",)


def runs_model(model) -> str:
    """'' when `offloadsim run` can run `model`, else why not (one clause)."""
    if model.family not in RUNS_FAMILIES or model.n_routed_experts:
        return (f"its runner computes dense {', '.join(RUNS_FAMILIES)} checkpoints, not {model.family}"
                + (" (mixture of experts)" if model.n_routed_experts else ""))
    if model.weight_format.name not in RUNS_FORMATS:
        return f"its runner reads {'/'.join(RUNS_FORMATS)} weights, not {model.weight_format.name}"
    return ""


class OffloadsimEngine(Engine):
    name = "offloadsim"
    label = "offloadsim's engine"
    rank = 0
    policy_rank = 4
    pricing_class = OffloadsimPricing
    plans_itself = True
    kv_homes = ("vram", "pinned", "pageable")  # a cache in RAM copied to the GPU per step (validate/stream_run.py)

    def policies(self) -> dict:
        return {"stream": stream, "resident": resident}

    def how_to_run(self, ref: RunRef) -> tuple[list[str], str]:
        why = runs_model(ref.model)
        if why:
            return [], f"not runnable here: {why}; the time is the plan on offloadsim's pipeline"
        weights = ref.weights("folder")
        plan = ref.plan_file or "plan.json"
        run = f"offloadsim run {weights} --plan {plan} --prompt 'Hello' --max-new-tokens {ref.w.new_tokens}"
        notes = ([f"save the plan first: offloadsim plan with these budgets and --out {plan}"]
                 if ref.plan_file is None else []) \
            + ([f"{weights}: the model's checkpoint folder (safetensors and tokenizer)"] if weights != ref.ref else [])
        return [run], "; ".join(notes)


ENGINE = OffloadsimEngine()
