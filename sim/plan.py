"""The plan format (frozen, versioned JSON on disk), the workload, the memory budgets and the request (all four).

A plan says, for every unit, where it is stored and where it is computed, and how the loader streams.
Plans are made by policies and the planner; the simulator and the engine only consume them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import (BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, ValidationError, model_serializer,
                      model_validator)

from hwmodels.specs import MachineSpec
from hwmodels.units import GiB, InputError
from sim.costs.tiers import Tier
from sim.costs.transfer import Codec
from sim.model.shapes import ModelShape
from hwmodels.files import load_json, write_atomic
from hwmodels.names import Name
from hwmodels.ranges import check_numbers

PLAN_VERSION = 1
# where a plan keeps the KV cache of its GPU-computed layers: in VRAM; in pinned or pageable RAM, copied to the GPU
# for each step; or in pageable RAM with attention computed by the CPU (llama.cpp's -nkvo)
KV_HOMES = ("vram", "pinned", "pageable", "cpu")
OS_RESERVE_BYTES = 4 * GiB  # RAM the default budget leaves to the OS and other programs [E]
MAX_PLAN_BYTES = 64 * 2**20
MAX_SLOTS = 64  # staging buffers, prefetch depth and reader threads: engines use 1-4


class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Placement(Spec):
    unit: str = Field(description="Unit name (ModelShape unit).")
    tier: Tier = Field(description="Where the unit's weights are stored between uses.")
    compute: Literal["gpu", "cpu"] = Field(default="gpu", description="Where the unit is computed.")


class Plan(Spec):
    version: Literal[1] = Field(default=PLAN_VERSION, description="Plan format version.")
    model: Name = Field(description="Model name the plan was made for.")
    machine: Name = Field(description="Machine name the plan was made for.")
    policy: str = Field(default="custom", description="Who made the plan (a policy name or 'planner').")
    engine: str = Field(
        default="offloadsim", pattern=r"^[a-z][a-z0-9_]*$", description="The engine that executes the plan, by its "
        "folder's name in sim/engines (an engine not installed is refused where the plan is run); a peer adds its "
        "measured host costs (machine.peers).")
    placements: tuple[Placement, ...] = Field(description="One placement per unit, in model order.")
    prefetch_depth: NonNegativeInt = Field(default=1, le=MAX_SLOTS, description="Loads may run this many streamed units ahead of "
                                           "compute; 0 loads a unit only when the previous unit has finished.")
    overlap_copy: bool = Field(default=True, description="Host-to-device copies overlap compute (side stream); False "
                               "makes each copy wait for the previous unit's compute (blocking copy).")
    vram_slots: PositiveInt = Field(default=2, le=MAX_SLOTS, description="VRAM staging buffers, each the size of the largest streamed unit.")
    pinned_slots: NonNegativeInt = Field(default=2, le=MAX_SLOTS, description="Pinned host staging buffers for disk reads and unpacking.")
    pinned_staging: bool = Field(default=True, description="Disk reads land in pinned buffers (else pageable copies).")
    reader_threads: PositiveInt = Field(default=1, le=MAX_SLOTS, description="Parallel disk reads (SimPy only).")
    codec: Codec | None = Field(default=None, description="Codec of the compressed tiers.")
    expert_predictor_hit_rate: float | None = Field(default=None, ge=0, le=1, description="Fraction of routed experts "
                                                    "guessed one layer ahead; None: loads wait for the router.")
    gpu_offload_min_tokens: PositiveInt | None = Field(default=None, description="llama.cpp: when a step has at least "
                                                       "this many tokens, CPU-placed units are copied to and computed on the GPU.")
    devices: tuple[NonNegativeInt, ...] | None = Field(default=None, description="The GPU of each placement, in "
                                                        "model order (layers split over several GPUs, a pipeline); "
                                                        "None: every unit on GPU 0.")
    kv: Literal["vram", "pinned", "pageable", "cpu"] | None = Field(
        default=None, description="Where the KV cache of the GPU-computed layers lives (KV_HOMES): 'vram'; 'pinned' "
        "or 'pageable' RAM, copied to the GPU at each step; 'cpu': pageable RAM, attention computed on the CPU. None: "
        "'vram'.")
    feasible: bool = Field(default=True, description="False when no plan fits the budgets.")
    reason: str = Field(default="", description="Why the plan is infeasible, naming the fix.")

    @model_validator(mode="after")
    def _one_device_each(self) -> "Plan":
        if self.devices is not None and len(self.devices) != len(self.placements):
            raise ValueError(f"devices names {len(self.devices)} GPUs for {len(self.placements)} placements; give one "
                             "GPU index per placement")
        return self

    @model_serializer(mode="wrap")
    def _one_gpu_as_before(self, handler):
        """A plan on one GPU with its KV cache in VRAM writes neither key: its JSON is what it was before."""
        data = handler(self)
        if isinstance(data, dict):
            for key in ("devices", "kv"):
                if data.get(key) is None:
                    data.pop(key, None)
        return data

    @property
    def gpu_count(self) -> int:
        return max(self.devices) + 1 if self.devices else 1

    @property
    def kv_home(self) -> str:
        return self.kv or "vram"

    def tiers(self) -> dict[str, Placement]:
        return {p.unit: p for p in self.placements}

    def save(self, path: str | Path) -> None:
        """Write atomically (temp file then rename)."""
        write_atomic(Path(path), self.model_dump_json(indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "Plan":
        """Read and check a plan file; raises InputError naming the field, the value and the fix."""

        data = load_json(Path(path), "plan", MAX_PLAN_BYTES, "give a plan JSON written by 'offloadsim plan'")
        if not isinstance(data, dict):
            raise InputError(f"plan: {str(path)!r} is not a JSON object; give a plan JSON written by 'offloadsim plan'.")
        if data.get("version", PLAN_VERSION) != PLAN_VERSION:
            raise InputError(f"plan: version {data.get('version')!r} in {str(path)!r} is not supported; "
                             f"re-create it with this offloadsim (version {PLAN_VERSION}).")
        try:
            plan = cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            value = repr(err.get("input"))
            value = value if len(value) <= 60 else value[:57] + "..."
            raise InputError(f"plan: field {'.'.join(map(str, err['loc']))!r} = {value} in {str(path)!r}: "
                             f"{err['msg']}; fix the plan file.") from None
        check_numbers(plan.model_dump(), f"plan: {str(path)!r}", "fix the plan file")
        if not plan.feasible:
            raise InputError(f"plan: field 'feasible' is false in {str(path)!r} ({plan.reason[:120]}); give a plan that "
                             "fits its budgets.")
        return plan


class Workload(Spec):
    batch: PositiveInt = Field(default=1, description="Sequences decoded together.")
    prompt_tokens: PositiveInt = Field(default=128, description="Prompt length P (the prefill step).")
    new_tokens: PositiveInt = Field(default=16, description="Tokens generated: one prefill step then N-1 decode steps.")
    warm: bool = Field(default=False, description="The page cache holds what fits from a previous run.")
    expert_skew: float = Field(default=0.0, ge=0, description="Zipf exponent of expert popularity (0 = uniform).")
    seed: int = Field(default=0, description="Seed of the expert draws.")
    context: PositiveInt | None = Field(default=None, description="Tokens of context per sequence the engine "
                                        "reserves a KV cache for (llama.cpp's -c over the sequences); None: the "
                                        "prompt and the new tokens.")

    @property
    def context_tokens(self) -> int:
        """The tokens per sequence whose KV cache is reserved: `context`, at least the prompt and the new tokens."""
        return max(self.context or 0, self.prompt_tokens + self.new_tokens)


class Budgets(Spec):
    vram_bytes: NonNegativeInt = Field(description="VRAM for weights, staging, KV cache and activations.")
    ram_bytes: NonNegativeInt = Field(description="RAM for weights and pinned buffers; the rest is page cache.")
    pinned_bytes: NonNegativeInt = Field(description="Pinned RAM (resident pinned weights and staging).")

    @classmethod
    def unlimited(cls) -> "Budgets":
        """No memory limit: for counterfactual and profiling runs."""
        return cls(vram_bytes=2**62, ram_bytes=2**62, pinned_bytes=2**62)

    @classmethod
    def of(cls, machine: MachineSpec, vram: int | None = None, ram: int | None = None, pinned: int | None = None) -> "Budgets":
        """Defaults: the whole VRAM, the whole RAM less 4 GiB for the OS, half the RAM pinnable."""
        ram_b = ram if ram is not None else max(machine.host_memory.capacity_bytes - OS_RESERVE_BYTES, 0)
        return cls(vram_bytes=vram if vram is not None else machine.gpu.vram_bytes, ram_bytes=ram_b,
                   pinned_bytes=pinned if pinned is not None else ram_b // 2)


@dataclass(frozen=True)
class Request:
    """What a plan is made for: a model, a machine, a workload and the memory budgets. Frozen; `replace` gives a
    variant (another workload, budgets or machine)."""
    model: ModelShape
    machine: MachineSpec
    workload: Workload
    budgets: Budgets

    @property
    def w(self) -> Workload:
        return self.workload

    def replace(self, **changes) -> "Request":
        return dataclasses.replace(self, **changes)
