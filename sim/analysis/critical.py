"""The critical path over the event graph (networkx) and per-unit stall attribution (counterfactual residency)."""
from __future__ import annotations

from collections import defaultdict

import networkx as nx

from sim.run.events import Event

EPS = 1e-9


def event_graph(events: list[Event], prefetch_depth: int, pipeline=None) -> nx.DiGraph:
    """Nodes are events (not waits); edges are precedence: a load's stages in order, each stage to its compute,
    consecutive events on one resource, and the compute chain. Edges carry `kind`: 'end' (successor starts when
    the predecessor ends) or 'start' (the prefetch window opens when an earlier compute starts). With `pipeline`
    = (schedule, sim.run.pipeline.rules(...)) the load edges are the pipeline's own rules; without it they are inferred
    from the prefetch depth (events from an engine run, say)."""
    g = nx.DiGraph()
    by_item: dict[tuple[int, str], dict[str, int]] = defaultdict(dict)
    lanes: dict[str, list[int]] = defaultdict(list)
    computes: list[int] = []
    for idx, e in enumerate(events):
        if e.stage == "wait":
            continue
        g.add_node(idx, event=e)
        by_item[(e.token, e.unit)][e.stage] = idx
        lanes[e.resource].append(idx)
        if e.stage == "compute":
            computes.append(idx)
    for stages in by_item.values():
        chain = [stages[s] for s in ("read", "unpack", "copy", "compute") if s in stages]
        for a, b in zip(chain, chain[1:]):
            g.add_edge(a, b, kind="end")
    for idxs in lanes.values():
        idxs.sort(key=lambda i: events[i].start_s)
        for a, b in zip(idxs, idxs[1:]):
            g.add_edge(a, b, kind="end")
    computes.sort(key=lambda i: events[i].start_s)
    for a, b in zip(computes, computes[1:]):
        g.add_edge(a, b, kind="end")
    if pipeline is not None:
        _rule_edges(g, events, by_item, *pipeline)
        return g
    loads = [i for i in computes if len(by_item[(events[i].token, events[i].unit)]) > 1]
    for k, i in enumerate(loads):
        stages = by_item[(events[i].token, events[i].unit)]
        first = next(stages[s] for s in ("read", "unpack", "copy") if s in stages)
        if prefetch_depth >= 1 and k >= prefetch_depth:
            g.add_edge(loads[k - prefetch_depth], first, kind="start")
    pos = {c: n for n, c in enumerate(computes)}
    for i in loads:  # with no prefetch or a blocking copy, a stage may wait for the previous compute's end
        n = pos[i]
        if n:
            stages = by_item[(events[i].token, events[i].unit)]
            for s in ("read", "copy"):
                if s in stages:
                    g.add_edge(computes[n - 1], stages[s], kind="end")
    return g


def _rule_edges(g: nx.DiGraph, events: list[Event], by_item, sch, rules) -> None:
    """The waits of sim/run/pipeline.py as edges between the events of the items they name."""
    names, step, unit = sch.names, sch.step.tolist(), sch.unit.tolist()

    def ev(i: int, stage: str):
        return by_item.get((step[i], names[unit[i]]), {}).get(stage)

    for i in rules.loads.tolist():
        stages = by_item.get((step[i], names[unit[i]]), {})
        first = next((stages[s] for s in ("read", "unpack", "copy") if s in stages), None)
        if first is None:
            continue
        waits = [(rules.window[i], "compute", first, "start"), (rules.after[i], "compute", first, "end"),
                 (sch.gate[i], "compute", first, "end"), (rules.vram_from[i], "compute", stages.get("copy"), "end"),
                 (rules.pin_from[i], "copy", first, "end"),
                 (i - 1 if rules.blocking[i] else -1, "compute", stages.get("copy"), "end")]
        for j, stage, node, kind in waits:
            src = ev(int(j), stage) if j >= 0 else None
            if src is not None and node is not None and src != node:
                g.add_edge(src, node, kind=kind)


def critical_path(events: list[Event], prefetch_depth: int, pipeline=None) -> list[Event]:
    """Walk back from the last compute through tight predecessors; returns the path in time order.
    Where no modelled edge is tight, the event that ended at that instant (a released slot) is taken."""
    g = event_graph(events, prefetch_depth, pipeline)
    if not g:
        return []
    node = max((n for n in g if g.nodes[n]["event"].stage == "compute"), key=lambda n: g.nodes[n]["event"].end_s)
    ends: dict[float, list[int]] = defaultdict(list)
    for n in g:
        ends[g.nodes[n]["event"].end_s].append(n)
    path, seen = [node], {node}
    while True:
        e = g.nodes[node]["event"]
        if e.start_s <= EPS:
            break
        best = None
        for p in g.predecessors(node):
            pe, kind = g.nodes[p]["event"], g.edges[p, node]["kind"]
            t = pe.end_s if kind == "end" else pe.start_s
            if abs(t - e.start_s) <= EPS * max(1.0, e.start_s) and (best is None or pe.end_s > g.nodes[best]["event"].end_s):
                best = p
        if best is None:  # a slot or buffer released by whatever ended right then
            best = next((n for n in ends.get(e.start_s, []) if n not in seen), None)
        if best is None or best in seen:  # each event once: zero-length events ending together never loop
            break
        node = best
        seen.add(node)
        path.append(node)
    return [g.nodes[n]["event"] for n in reversed(path)]


def path_breakdown(path: list[Event]) -> dict[str, float]:
    """Seconds of the critical path spent in each stage (overlaps counted once, in time order)."""
    out: dict[str, float] = defaultdict(float)
    t = path[0].start_s if path else 0.0
    for e in path:
        span = e.end_s - max(t, e.start_s)
        if span > 0:
            label = f"read_{e.detail}" if e.stage == "read" else f"{e.stage}_{e.resource}" if e.stage == "compute" else e.stage
            out[label] += span
            t = e.end_s
    return dict(out)
