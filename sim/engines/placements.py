"""Every engine's placements as plans (../shared/reference/peer-engines.md), through one registry.

Each policy is a pure function (model, machine, workload, budgets) -> Plan that imitates its engine's placement
and runtime: what is resident, where it is computed, how far ahead it loads and whether copies overlap compute.
The policies come from the engines' packages (Engine.policies); an engine with host costs of its own also gets
'NAME-ideal': its placement run by offloadsim's engine without those costs.
"""
from __future__ import annotations

from hwmodels.specs import MachineSpec
from hwmodels.units import unknown_name
from sim.engines import engines
from sim.engines.common import Policy
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload


def _idealised(name: str, own: Policy, core: str) -> Policy:
    def ideal(model: ModelShape, machine: MachineSpec, w: Workload, budgets: Budgets) -> Plan:
        return own(model, machine, w, budgets).model_copy(update={"policy": f"{name}-ideal", "engine": core})
    ideal.__doc__ = f"{name}'s placement and pipeline run by offloadsim's engine, without {name}'s own host costs."
    return ideal


def _by_policy_rank() -> list:
    return sorted(engines().values(), key=lambda e: (e.policy_rank, e.name))


def _policies() -> dict[str, Policy]:
    found = _by_policy_rank()
    core = next(e.name for e in found if e.plans_itself)
    out: dict[str, Policy] = {}
    for e in found:
        out.update(e.policies())
    for e in found:
        if e.idealised():
            out.update({f"{n}-ideal": _idealised(n, p, core) for n, p in e.policies().items()})
    return out


POLICIES: dict[str, Policy] = _policies()


def peer_policies(dominated: bool = True) -> dict[str, Policy]:
    """The placements of the engines the planner does not plan for (the baselines), with those that streaming
    everything always beats where `dominated`."""
    return {n: POLICIES[n] for e in _by_policy_rank() if not e.plans_itself
            and (dominated or not e.dominated_by_streaming) for n in e.policies()}


def get_policy(name: str) -> Policy:
    if name not in POLICIES:
        raise unknown_name("policy", name, list(POLICIES))
    return POLICIES[name]
