"""AirLLM's placement: every layer re-read from its file each token (../shared/reference/peer-engines.md)."""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from sim.costs.memory import check_plan
from sim.engines.airllm.loader import AIRLLM_PIN_LIMIT_BYTES
from sim.engines.common import make_plan
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload


def airllm(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
    """Every unit re-read from its per-layer file each token, one read ahead on a worker thread; blocking copy, no
    copy/compute overlap; layers up to 2 GiB pinned. A model whose head is tied to its embedding keeps that one
    matrix resident on the GPU and streams the rest (airllm 4.0 `_install_streaming_hooks`: the embedding is loaded
    once and the head re-tied to it; only the decoders and the final norm get streaming hooks)."""
    resident = {"embedding", "lm_head"} if model.tied_head else set()
    tiers = {u.name: "vram" if u.kind in resident else "disk_raw" for u in model.units}
    biggest = max(u.nbytes for u in model.units if u.kind not in resident)
    plan = make_plan(model, machine, "airllm", tiers, prefetch_depth=1,
                     overlap_copy=False, vram_slots=1, pinned_slots=2, pinned_staging=biggest <= AIRLLM_PIN_LIMIT_BYTES,
                     engine="airllm")
    check_plan(model, plan, w, budgets)
    return plan
