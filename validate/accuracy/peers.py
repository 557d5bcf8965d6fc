"""Every access of the accuracy readers to the peer engines' cost model, in one place: the peer costs a recorded
profile carries (each engine's typed costs, sim.engines.costs_of), the runs of a peer (validate.peer_calibration's PeerRun, its
fits and its prediction), llama-bench's records as runs (sim.engines.llamacpp.bench) and the peers' placements. The
other modules of validate.accuracy reach the peers through these functions only."""
from __future__ import annotations

import dataclasses
import functools

from hwmodels.presets import load_machine
from hwmodels.specs import MachineSpec
from sim.engines import costs_of
from sim.engines.accelerate.export import tiers_from_device_map
from sim.engines.accelerate.placement import accelerate_map
from sim.engines.llamacpp.layout import llamacpp_ngl
from sim.engines.placements import POLICIES
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload
from sim.engines.llamacpp.bench import bench_budgets, mapped_of, median_time_s, run_of
from sim.engines.llamacpp.fitting import fit_host_scale, host_scaled
from validate.peer_calibration import PeerRun, fit, fit_scalar, predict, with_peer

__all__ = ["PeerRun", "bench_budgets", "mapped_of", "median_time_s", "bench_run", "llamacpp_plan"]

PRESET = "h200-testbox"  # the preset of the host every recorded call ran on
# peer costs that calibrate measures on the host, not fitted on runs (what a profile lacks comes from the preset)
MEASURED = {"accelerate": ("disk_tensor_s", "disk_header_entry_s", "hook_module_s"), "airllm": ("load_unit_s",)}
# llama.cpp costs fitted each alone on runs of their own, after the others (the report's --fit-* options)
LLAMACPP_APART_BOUNDS = {"gpu_offload_split_prompt_s": (1e-7, 1e-3), "gpu_moe_expert_s": (1e-10, 1e-5),
                         "gpu_offload_split_pinned_s": (1e-7, 1e-3)}


@functools.cache
def preset_machine() -> MachineSpec:
    return load_machine(PRESET)


def profile_machine(profile_machine_data: dict, cpu_llc_default: bool = False) -> MachineSpec:
    """The machine of a recorded profile without the peer costs it carried (defaults of the code that recorded it:
    today's are used). `cpu_llc_default`: a profile recorded before the CPU's cache size was fills it from the
    preset (every call ran on the same host)."""
    data = {k: v for k, v in profile_machine_data.items() if k != "peers"}
    if cpu_llc_default:
        data["cpu"] = {**data["cpu"], "llc_bytes": data["cpu"].get("llc_bytes") or preset_machine().cpu.llc_bytes}
    return MachineSpec.model_validate(data)


def cleanup_measured(profile: dict) -> bool:
    """Whether calibrate timed AirLLM's cleanup per module on that host (validate/module_cleanup.py)."""
    return "module_cleanup" in profile.get("calibration", {}).get("measurements", {})


def hf_profile_machine(profile: dict, accelerate_costs=None) -> MachineSpec:
    """The machine of an Accelerate/AirLLM call's profile: today's engine costs (or `accelerate_costs`), with what
    calibrate measured of them on that host; what it did not measure yet, from the preset."""
    preset = preset_machine()
    prof = profile["machine"]
    machine = profile_machine(prof)
    for engine, fields in MEASURED.items():
        if engine == "airllm" and not cleanup_measured(profile):
            continue
        got = prof.get("peers", {}).get(engine, {})
        base = accelerate_costs if engine == "accelerate" and accelerate_costs is not None else costs_of(machine, engine)
        machine = with_peer(machine, engine, base.model_copy(
            update={k: got[k] if k in got else getattr(costs_of(preset, engine), k) for k in fields}))
    return machine


def preset_accelerate_costs():
    """The preset's Accelerate costs: what `plan --engine accelerate` prices an exported plan with."""
    return costs_of(preset_machine(), "accelerate")


def accelerate_plan(shape: ModelShape, machine: MachineSpec, w: Workload, big: Budgets, device_map: dict,
                    on_gpu: bool) -> Plan:
    """The plan of the device map Accelerate chose (an empty map: every module on one device)."""
    return accelerate_map(shape, machine, w, big, tiers_from_device_map(shape, device_map, on_gpu),
                          "accelerate (measured map)")


def airllm_plan(shape: ModelShape, machine: MachineSpec, w: Workload, big: Budgets) -> Plan:
    return POLICIES["airllm"](shape, machine, w, big)


def fit_hf(engine: str, cal: list[tuple[ModelShape, MachineSpec, PeerRun]]):
    """An engine's host costs fitted on its calibration runs (validate.peer_calibration.fit)."""
    return fit(engine, cal)


def with_fitted(machine: MachineSpec, engine: str, spec, profile: dict) -> MachineSpec:
    """The machine with an engine's fitted costs, what calibrate measured of them kept from the machine."""
    if spec is None:
        return machine
    keep = MEASURED[engine] if engine == "accelerate" or cleanup_measured(profile) else ()
    return with_peer(machine, engine, spec.model_copy(update={k: getattr(costs_of(machine, engine), k) for k in keep}))


def predict_run(shape: ModelShape, machine: MachineSpec, run: PeerRun) -> dict:
    """The simulator's summary of a peer's run (fast_simulate, with the run's engine differences)."""
    return predict(shape, machine, run)


def with_build(run: PeerRun, flash_attention: bool) -> PeerRun:
    """The run priced for the llama.cpp build that ran it (with or without ggml-cuda's flash-attention kernels)."""
    return dataclasses.replace(run, peer_update={**run.peer_update, "flash_attention": flash_attention})


def bench_run(rec: dict, shape: ModelShape, machine: MachineSpec, plan: Plan | None, label: str) -> PeerRun:
    """A llama-bench record as a run (sim.engines.llamacpp.bench.run_of)."""
    return run_of(rec, shape, machine, plan, label)


def llamacpp_plan(shape: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets, ngl: int, ncmoe: int,
                  mapped: bool) -> Plan:
    """llama.cpp's placement of `-ngl N` (and --n-cpu-moe)."""
    return llamacpp_ngl(shape, machine, w, budgets, ngl, ncmoe, mapped)


def fit_llamacpp(cal: list, apart: dict[str, list]):
    """llama.cpp's costs fitted on `cal` (shape, machine, run), then each cost of LLAMACPP_APART_BOUNDS alone on its
    runs in `apart` (field -> [(shape, machine, run)]), in that order; those start unmeasured, so the fit depends on
    its inputs alone."""
    spec = fit("llamacpp", cal).model_copy(
        update={"gpu_moe_expert_s": 0.0, "gpu_offload_split_pinned_s": None, "gpu_offload_split_prompt_s": None})
    for field, bounds in LLAMACPP_APART_BOUNDS.items():
        runs = [(shape, with_peer(m, "llamacpp", spec), r) for shape, m, r in apart.get(field, [])]
        if runs:
            x = fit_scalar("llamacpp", runs, lambda v, field=field: spec.model_copy(update={field: v}), bounds)
            spec = spec.model_copy(update={field: x})
    return spec


def with_llamacpp(machine: MachineSpec, spec, scale: float = 1.0) -> MachineSpec:
    """The machine with llama.cpp's costs `spec`, its CPU speeds scaled by `scale` (a host's own calibration)."""
    return with_peer(machine, "llamacpp", host_scaled(spec, scale))


def llamacpp_host_scale(shape: ModelShape, machine: MachineSpec, spec, run: PeerRun) -> float:
    """The factor on llama.cpp's CPU speeds that one run on a host gives (fit_host_scale)."""
    return fit_host_scale("llamacpp", [(shape, with_peer(machine, "llamacpp", spec), run)])
