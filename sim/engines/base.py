"""What an engine is to the simulator: its typed costs, its placements, and the hooks the schedule asks.

An engine is a subpackage of sim/engines with an `engine.py` that defines ENGINE, an instance of Engine. The
schedule builder (sim/run/schedule.py) never branches on an engine: it asks the plan's engine for a Pricing of the
request (Engine.pricing), whose hooks return the engine's part of each number.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from hwmodels.specs import MachineSpec
from hwmodels.units import InputError
from sim.model.shapes import ModelShape, UnitShape
from sim.plan import Budgets, Plan, Workload

Policy = Callable[[ModelShape, MachineSpec, Workload, Budgets], Plan]


class Costs(BaseModel):
    """An engine's measured host costs: a frozen model, every field described; each value's source is in the
    machine's `sources` under `peers.ENGINE.FIELD`."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    def host_scaled(self, scale: float) -> "Costs | None":
        """These costs on a host whose CPU runs the engine's own kernels `scale` times as fast; None: the engine
        has no CPU kernels of its own (the machine's grids price them)."""
        return None


# the defaults of the one flat model the engines' costs were once held in: a profile written then holds every field
# for every engine, so such a key that an engine does not have is dropped when it holds its old default
LEGACY_DEFAULTS: dict[str, Any] = {
    "step_s": 0.0, "load_module_s": 0.0, "disk_tensor_s": 0.0, "disk_header_entry_s": 0.0, "hook_module_s": 0.0,
    "load_unit_s": 0.0, "pin_each_load": False, "cpu_compute_scale": 1.0, "cpu_bytes_per_s": None,
    "cpu_cache_bytes_per_s": None, "cpu_head_bytes_per_s": None, "cpu_cache_share": 0.6, "cpu_cache_share_alone": 1.0,
    "cpu_op_s": 0.0, "cpu_row_s": 0.0, "gpu_op_s": None, "gpu_row_s": 0.0, "gpu_multi_row_s": 0.0,
    "gpu_row_token_s": None, "cpu_flops_per_s": None, "gpu_offload_split_s": 0.0, "gpu_offload_split_prompt_s": None,
    "gpu_moe_expert_s": 0.0, "gpu_offload_split_pinned_s": None, "gpu_graph_warmup_op_s": 0.0,
    "flash_attention": True, "flash_attn": "auto", "gpu_mm_attention_s": 0.0, "cpu_mm_attention_s": 0.0,
    "gpu_compute_scale": 1.0, "gpu_dispatch": "eager", "head_last_position": True, "mmap_reads": False}
_NO_DEFAULT = object()


def validate_costs(engine: str, model: type[Costs], raw: dict[str, Any]) -> Costs:
    """`engine`'s costs from a profile's raw values; raises InputError naming an unknown field or a bad value."""
    values = {k: v for k, v in raw.items() if k in model.model_fields
              or (k != "source" and LEGACY_DEFAULTS.get(k, _NO_DEFAULT) != v)}
    unknown = sorted(set(values) - set(model.model_fields))
    if unknown:
        raise InputError(f"peers.{engine}: unknown cost field {unknown[0]!r}; {engine}'s costs are "
                         f"{', '.join(model.model_fields)}: remove it from the profile.")
    try:
        return model(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise InputError(f"peers.{engine}.{where}: {err.get('input')!r} is not valid ({err['msg']}); fix the "
                         "value in the profile.") from None


@dataclass(frozen=True)
class Kernels:
    """How an engine's own kernels are priced against the machine's grids (sim.costs.compute): a value per device
    where a dict is keyed by `cpu` (True: the CPU)."""
    dispatch: str = "graph"  # GPU kernels launched from captured CUDA graphs, or 'eager'
    scale: dict = field(default_factory=lambda: {True: 1.0, False: 1.0})
    op_s: dict = field(default_factory=lambda: {True: 0.0, False: None})
    row_s: float = 0.0
    cpu_row_s: float = 0.0
    multi: tuple | None = None  # (per row, per row and token) of a GPU step of several sequences
    cpu_flops: float | None = None
    cpu_fused: bool = True  # its CPU attention fused (flash attention)
    stream: dict = field(default_factory=lambda: {"decoder": None, "lm_head": None})  # its CPU kernels' speed
    last_only: bool = False  # the head computes the last position of each sequence only


class Pricing:
    """An engine's answers for one request (model, machine, plan, workload): the schedule's hooks. The defaults are
    an ideal engine's: no host costs of its own."""
    static_cache = False  # attends over its whole static cache at every decode step (one graph for all)
    per_op_offload = False  # decides per operation what a step offloads (its head sees one token a sequence)

    def __init__(self, model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload, costs: Costs | None):
        self.model, self.machine, self.plan, self.w, self.costs = model, machine, plan, w, costs
        self.tiers = plan.tiers()

    def startup_s(self) -> float:
        """Seconds a run loses before its first load is ready."""
        return 0.0

    def cache_read_bytes_per_s(self) -> float:
        """The speed of a read the page cache serves."""
        return self.machine.storage.cache_read_bytes_per_s

    def kernels(self) -> Kernels:
        return Kernels()

    def maps_rows(self) -> bool:
        """A CPU lookup in an embedding read from disk touches the rows it reads in place, not the table."""
        return False

    def pins(self, u: UnitShape) -> bool:
        """Whether the engine stages this unit's load through pinned memory when the plan stages."""
        return True

    def load_costs(self, ui: int, tier: str, load: int, copy_s: float, pins: bool) -> tuple[float, float]:
        """(host seconds added to the unit's unpack lane, compute-lane overhead) of a unit's row: `load`, its kind
        of load (sim.run.items: 0, CPU_READ, GPU_LOAD) taking `copy_s` to copy; `pins`, staged through pinned
        memory."""
        return 0.0, 0.0

    def compute_s(self, ui: int, cpu: bool, base_s: float, shape: tuple[int, int, int], s: int,
                  first_expert: bool) -> float:
        """An item's compute time from its kernels' `base_s`; shape: (batch, new tokens, context)."""
        return base_s

    def post_pass(self, sch) -> None:
        """Adjust the finished schedule (after its warm contents are known)."""


@dataclass(frozen=True)
class RunRef:
    """What a user runs a plan with (Engine.how_to_run): the model as they named it (`ref`: a folder, a .gguf file, a
    Hub id or a preset name), the plan, the request, the machine, the budgets, and where the plan was saved."""
    model: ModelShape
    ref: str
    plan: Plan
    w: Workload
    machine: MachineSpec
    budgets: Budgets
    plan_file: str | None = None

    def weights(self, kind: str) -> str:
        """The name a command gives the weights: the user's own where it is of `kind` ('gguf': a .gguf file,
        'folder': a checkpoint folder, 'hf': a folder or a Hub id), else a placeholder to replace."""
        if kind == "gguf":
            return self.ref if self.ref.endswith(".gguf") else "MODEL.gguf"
        if Path(self.ref).is_dir():
            return self.ref
        hub_id = "/" in self.ref and not Path(self.ref).exists() and not self.ref.endswith((".json", ".gguf"))
        return self.ref if kind == "hf" and hub_id else "CHECKPOINT"


class Engine:
    """An engine: its name, costs model, placements and Pricing class. Subclasses set the class attributes."""
    name: ClassVar[str]
    label: ClassVar[str]  # how a sentence names it
    rank: ClassVar[int] = 50  # where it is listed among the engines
    policy_rank: ClassVar[int] = 50  # where its policies are listed among the policies
    dominated_by_streaming: ClassVar[bool] = False  # its placement never beats streaming everything with overlap
    costs_model: ClassVar[type[Costs] | None] = None
    unmeasured_source: ClassVar[str] = ""  # where its default costs come from (read from its source, not measured)
    pricing_class: ClassVar[type[Pricing]] = Pricing
    exports: ClassVar[bool] = False  # the engine takes a placement as arguments (export)
    export_form: ClassVar[str] = ""  # how a sentence names its export (e.g. "an Accelerate device_map")
    no_export_why: ClassVar[str] = ""  # why it takes no placement, where it takes none
    computes_rest_on_cpu: ClassVar[bool] = False  # its placement computes on the CPU what the GPU does not hold
    plans_itself: ClassVar[bool] = False  # the planner (planner/core.py) plans for it rather than best_plan
    kv_homes: ClassVar[tuple[str, ...]] = ("vram",)  # where it can keep the KV cache of its GPU layers (Plan.kv)
    default_placement: ClassVar[str] = ""  # what it does with no plan, in words (its own placement policy)
    fitting: ClassVar[Any] = None  # what validate/peer_calibration.py fits of its costs (sim.engines.measured.Fitting)

    def policies(self) -> dict[str, Policy]:
        """Its placement policies by name (sim.engines.placements)."""
        return {}

    def idealised(self) -> bool:
        """Whether its placements get an '-ideal' policy: run by offloadsim's engine without its host costs."""
        return self.costs_model is not None

    def pricing(self, model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload, costs: Costs | None):
        return self.pricing_class(model, machine, plan, w, costs)

    def gpu_memory(self, model: ModelShape, plan: Plan, w: Workload) -> tuple | None:
        """(staging, kv, activations, slot, host kv) bytes where the engine uses the GPU its own way; None: the
        streaming pipeline's (sim.costs.memory.memory_use)."""
        return None

    def refuse_vram(self, m, plan: Plan, budgets: Budgets) -> None:
        """Raise PlanError in the engine's own words when its use of the GPU (`m`, a MemoryUse) exceeds the budget."""

    def best_plan(self, model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets,
                  objective: str = "token") -> Plan:
        """The fastest plan the engine can run at these budgets (PlanError when none)."""
        raise NotImplementedError

    def plan_notes(self, model: ModelShape, machine: MachineSpec, plan: Plan, costs) -> list[str]:
        """Lines about how its plan was priced."""
        return []

    def measure_hint(self) -> str:
        """How to measure its costs on a machine, appended to the note that they are not measured."""
        return ""

    calibration_method: ClassVar[str] = ""  # what calibrate --peer NAME times, in words

    def calibrates(self) -> bool:
        """Whether `calibrate --peer NAME` times its costs."""
        return type(self).calibrate is not Engine.calibrate

    def calibrate(self, folder, config: dict, quick: bool) -> tuple[dict, dict]:
        """Time the engine's own costs on this host (`calibrate --peer NAME`): (measurements by name, cost values
        by field). Code that needs torch imports it inside the function that times."""
        raise InputError(f"peer: {self.label}'s costs are not timed by calibrate; measure them on runs of the engine "
                         "(calibrate-peer for llama.cpp).")

    def export(self, model: ModelShape, plan: Plan, w: Workload, machine: MachineSpec, budgets: Budgets) -> dict:
        raise InputError(f"export: {self.label} takes no placement; drop --export.")

    def how_to_run(self, ref: RunRef) -> tuple[list[str], str]:
        """(the command or code that runs `ref.plan` with this engine, a line on what to replace or why it cannot
        run this model; '' when nothing)."""
        return [], f"{self.label} has no command here"

    def costs_from(self, raw: dict[str, Any]) -> Costs:
        return validate_costs(self.name, self.costs_model, raw)

    def costs_for(self, machine: MachineSpec) -> Costs:
        """Its costs on `machine`: the machine's table for it (defaults where it has none). A peer engine derives
        them from its fitted machine's where the machine has none (its package's derived.costs_for)."""
        return self.costs_from(machine.peers.get(self.name, {}))
