"""A schedule over several GPUs, or with the KV cache placed in RAM: the one-GPU schedule, then each item on its
GPU with that GPU's copies, the activations handed from GPU to GPU, and the KV cache's copies or CPU attention.

Layers split over GPUs run as a pipeline of one micro-batch (llama.cpp's --split-mode layer, Accelerate's
device_map): compute stays one chain in model order, while each GPU copies its own share over its own link ahead of
its compute (its own prefetch window and VRAM slots: sim.run.pipeline.rules), at the speed the topology leaves it
when every GPU streams (hwmodels.topology.shared_rates). Where the chain passes from one GPU to the next, the next
GPU's item first waits for the activations' copy (hwmodels.topology.handoff_s), on its compute lane.
With several GPUs, CPU compute beside copies is not slowed (cpu.copy_contention is a one-GPU measurement).
"""
from __future__ import annotations

import numpy as np

from hwmodels.specs import MachineSpec
from hwmodels.topology import attached, handoff_s, shared_link, shared_rates
from sim.costs.kvcache import cpu_attention_extra_s, kv_copy_s
from sim.engines import engine_of
from sim.costs.memory import PlanError, check_plan
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload
from sim.run.items import Schedule
from sim.run.reads import warm_contents
from sim.run.schedule import build_schedule
from sim.run.steps import step_shape


def is_placed(machine: MachineSpec, plan: Plan) -> bool:
    """Whether the plan needs this module: several GPUs, or a KV cache outside VRAM."""
    return plan.devices is not None or plan.kv_home != "vram" or machine.topology is not None


def build_placed_schedule(model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload,
                          budgets: Budgets) -> Schedule:
    """The schedule of any plan: build_schedule's own where one GPU holds the KV cache, else this module's."""
    if not is_placed(machine, plan):
        return build_schedule(model, machine, plan, w, budgets)
    if plan.kv_home not in engine_of(plan.engine).kv_homes:
        raise PlanError(f"plan: kv {plan.kv_home!r} is not a place {plan.engine} keeps the KV cache; give one of "
                        f"{', '.join(engine_of(plan.engine).kv_homes)}.")
    if plan.gpu_count > machine.gpu_count:
        raise PlanError(f"plan: its devices name GPU {plan.gpu_count - 1} but machine {machine.name!r} has "
                        f"{machine.gpu_count}; give --gpus {plan.gpu_count} or plan for this machine.")
    mem = check_plan(model, plan, w, budgets)  # each GPU against the VRAM budget, the host's totals
    devices = np.array(plan.devices if plan.devices is not None else [0] * len(model.units), dtype=np.int64)
    gpu_units = [p.compute == "gpu" for p in plan.placements]
    rates = shared_rates(machine, {int(d) for d, on in zip(devices, gpu_units) if on} or {0})
    one = machine.model_copy(update={"topology": None, "link": shared_link(machine.link, *rates[0])})
    single = plan.model_copy(update={"devices": None, "kv": None})
    sch = build_schedule(model, one, single, w, Budgets(vram_bytes=2**62, ram_bytes=budgets.ram_bytes,
                                                         pinned_bytes=budgets.pinned_bytes))
    sch.memory, sch.cache_capacity_bytes = mem, mem.page_cache_bytes
    if w.warm:
        sch.warm_keys = warm_contents(sch)
    sch.gpu = devices[sch.unit]
    if machine.topology is not None or plan.gpu_count > 1:
        sch.contention = 1.0
        _per_gpu_copies(sch, rates)
        _handoffs(sch, model, machine, w)
    if plan.kv_home != "vram":
        _kv_costs(sch, model, machine, plan, w, rates)
    return sch


def _per_gpu_copies(sch: Schedule, rates: list[tuple[float, float]]) -> None:
    """Copies of GPU g's loads at its link's speed: the schedule priced them at GPU 0's (pinned speeds' ratio)."""
    for g in range(1, int(sch.gpu.max()) + 1):
        mine = sch.gpu == g
        if mine.any() and rates[g % len(rates)][0] != rates[0][0]:
            sch.copy_s[mine] *= rates[0][0] / rates[g % len(rates)][0]


def _handoffs(sch: Schedule, model: ModelShape, machine: MachineSpec, w: Workload) -> None:
    """Where the chain moves to another GPU, the activations of the step (batch x new tokens x hidden, 16 bit)
    are copied there before the item computes."""
    moved = np.flatnonzero(sch.gpu[1:] != sch.gpu[:-1]) + 1
    for i in moved.tolist():
        new, _ = step_shape(w, False, int(sch.step[i]))
        nbytes = 2.0 * model.hidden * w.batch * new
        sch.overhead_s[i] += handoff_s(machine, int(sch.gpu[i - 1]), int(sch.gpu[i]), nbytes)


def _kv_costs(sch: Schedule, model: ModelShape, machine: MachineSpec, plan: Plan, w: Workload,
              rates: list[tuple[float, float]]) -> None:
    """A KV cache in RAM: before each decode step a GPU layer's cache so far is copied over its GPU's link at the
    pinned or pageable speed, on the compute lane (the engine copies it just before the layer: validate/stream_run.py),
    or its attention runs on the CPU (sim.costs.kvcache)."""
    gpus = attached(machine)
    for i in np.flatnonzero(~sch.on_cpu).tolist():
        u, g = model.units[int(sch.unit[i])], int(sch.gpu[i])
        new, ctx = step_shape(w, False, int(sch.step[i]))
        link = gpus[g % len(gpus)].link
        pinned, pageable = rates[g % len(rates)]
        if plan.kv_home == "cpu":
            sch.compute_s[i] += cpu_attention_extra_s(u, gpus[g % len(gpus)].gpu, machine.cpu, (w.batch, new, ctx),
                                                      (pinned, link.latency_s))
            continue
        sch.overhead_s[i] += kv_copy_s(u, w.batch, new, ctx, pinned if plan.kv_home == "pinned" else pageable,
                                       link.latency_s)
