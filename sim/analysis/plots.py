"""Gantt chart of a run (matplotlib): lanes for storage, unpack, copy, GPU and CPU compute, and the waits."""
from __future__ import annotations

from pathlib import Path

from hwmodels.files import atomic_path
from sim.run.events import Event

LANE_ORDER = ["storage", "unpack", "copy", "gpu", "cpu", "gpu_wait", "cpu_wait"]
COLORS = {"read": "#8c564b", "unpack": "#9467bd", "copy": "#1f77b4", "compute": "#2ca02c", "wait": "#d62728"}


def gantt(events: list[Event], path: str | Path, title: str = "", tokens: tuple[int, int] | None = None,
          critical: list[Event] | None = None) -> None:
    """Write a PNG or SVG (by suffix); `tokens` limits the chart to a range of token steps."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evs = [e for e in events if tokens is None or tokens[0] <= e.token <= tokens[1]]
    extra = sorted({e.resource for e in evs} - set(LANE_ORDER))  # each further GPU's copy lane (copy1, ...)
    lanes = [lane for lane in LANE_ORDER if any(e.resource == lane for e in evs)] + extra
    fig, ax = plt.subplots(figsize=(12, 0.5 + 0.55 * len(lanes)))
    for row, lane in enumerate(lanes):
        by_stage: dict[str, list[tuple[float, float]]] = {}
        for e in evs:
            if e.resource == lane:
                by_stage.setdefault(e.stage, []).append((e.start_s, max(e.duration_s, 1e-9)))
        for stage, bars in by_stage.items():
            ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=COLORS.get(stage, "grey"), edgecolor="white",
                           linewidth=0.2, label=stage)
    if critical:
        crit = {(e.token, e.unit, e.stage) for e in critical}
        for row, lane in enumerate(lanes):
            bars = [(e.start_s, e.duration_s) for e in evs if e.resource == lane and (e.token, e.unit, e.stage) in crit]
            if bars:
                ax.broken_barh(bars, (row + 0.3, 0.12), facecolors="black")
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_title(title + ("  (black ticks: critical path)" if critical else ""), fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
