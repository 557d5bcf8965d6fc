"""Tiny hand-checkable models for timeline tests."""
from sim.model.formats import parse_format
from sim.plan import Budgets, Placement, Plan
from sim.model.shapes import ModelShape, UnitShape

FMT = parse_format("bf16")


def toy_model(sizes=(4, 8, 2), experts: int = 0, top_k: int = 0) -> ModelShape:
    """Decoder units of the given bytes; compute = bytes / VRAM bandwidth (no FLOPs, activations or overheads).
    With experts, each block is an attention unit followed by `experts` expert units of the same size."""
    units = []
    for i, nb in enumerate(sizes):
        base = dict(block=i, modules=(f"l{i}",), matrix_params=nb // 2, nbytes=nb, flop_params=0, hidden=0, launches=0)
        if experts:
            units.append(UnitShape(name=f"l{i}", kind="attention", **base))
            for e in range(experts):
                units.append(UnitShape(name=f"l{i}.e{e}", kind="expert", expert=e,
                                       **dict(base, modules=(f"l{i}.e{e}",))))
        else:
            units.append(UnitShape(name=f"l{i}", kind="decoder", **base))
    return ModelShape(name="toy", family="toy", weight_format=FMT, n_blocks=len(sizes), hidden=0, vocab=0,
                      n_routed_experts=experts, experts_per_token=top_k, units=tuple(units))


def toy_plan(model: ModelShape, tiers, **kw) -> Plan:
    if isinstance(tiers, str):
        tiers = [tiers] * len(model.units)
    placements = tuple(Placement(unit=u.name, tier=t) for u, t in zip(model.units, tiers))
    return Plan(model=model.name, machine="toy", placements=placements, **kw)


BIG = Budgets(vram_bytes=10**9, ram_bytes=10**9, pinned_bytes=10**9)
