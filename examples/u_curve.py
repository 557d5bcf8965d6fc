"""When does offloading draw a U? Time per token against the layers kept on the GPU, Llama-3.1-70B (Q4_K_M-like, 4.5
bits per weight), for the two ways an engine runs the layers it does not keep:

- computed on the CPU where they lie (llama.cpp's -ngl): every layer moved to the GPU takes its CPU time away, so
  the curve only falls. No U, on any machine; the measured llama.cpp sweeps (right) fall the same way.
- streamed to the GPU for every token (Accelerate's CPU offload, AirLLM), while with nothing on the GPU Accelerate
  computes on the CPU: from 0 to a few GPU layers the time jumps from the CPU's rate to the link's. That is the U,
  and it appears only where the link copies slower than the CPU reads memory (desktop-4090: PCIe 4.0 at 23.9 GB/s
  against DDR5 at 55 GB/s). Where the link is faster (h200-testbox: 55.5 against 40 GB/s) streaming wins at once.

The planner (black) mixes both and never draws a U. Writes u_curve.png.
"""
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from _common import figure, result  # noqa: E402
from hwmodels import get_machine  # noqa: E402
from planner import plan_with_report  # noqa: E402
from sim.costs.memory import PlanError, activation_bytes, kv_cache_bytes  # noqa: E402
from sim.engines.common import fit_slots, make_plan  # noqa: E402
from sim.model.formats import parse_format  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402
from sim.plan import Budgets, Workload  # noqa: E402
from sim.run.simulate import fast_simulate  # noqa: E402

MEASURED = Path(__file__).resolve().parent / "data" / "llamacpp_ngl_sweep.json"  # lab/reports/llamacpp_ngl_extract.py
model = load_model("llama-3.1-70b", parse_format("q4_k_m"))
w = Workload(prompt_tokens=64, new_tokens=4)
layers = [u for u in model.units if u.kind == "decoder"]
size = layers[0].nbytes


def timed(m, plan, b):
    try:
        return fast_simulate(model, m, fit_slots(model, plan, w, b, 3), w, b)["time_per_token_s"]
    except PlanError:
        return None


def point(machine, k: int, planner: bool) -> dict:
    """k decoder layers (and the head) resident; the rest on the CPU, or streamed from pinned RAM."""
    vram = k * size + 3 * size + kv_cache_bytes(model, w) + activation_bytes(model, w) + model.units[-1].nbytes
    # beyond the GPU's VRAM the points are hypothetical: the same machine with a GPU just large enough
    m = machine if vram <= machine.gpu.vram_bytes else \
        machine.model_copy(update={"gpu": machine.gpu.model_copy(update={"vram_bytes": vram})})
    b = Budgets.of(m, vram=vram)
    gpu = {u.name for u in layers[len(layers) - k:]} | {"lm_head"}
    tiers = {u.name: "vram" if u.name in gpu else "ram_pinned" for u in model.units}
    stream = make_plan(model, m, "stream", tiers, {model.units[0].name: "cpu"}, prefetch_depth=2, vram_slots=3,
                       pinned_slots=0)
    cpu = make_plan(model, m, "cpu", tiers, {u.name: "cpu" for u in model.units if u.name not in gpu},
                    prefetch_depth=0, vram_slots=1, pinned_slots=0)
    row = {"gpu_layers": k, "fraction": k / len(layers), "vram_bytes": vram, "fits": vram <= machine.gpu.vram_bytes,
           "stream": timed(m, stream, b), "cpu": timed(m, cpu, b)}
    if planner:
        rep = plan_with_report(model, m, w, b, confirm=False, time_budget_s=1.0)
        row["planner"] = fast_simulate(model, m, rep.plan, w, b)["time_per_token_s"] if rep.plan.feasible else None
    return row


def curves(name: str, planner: bool) -> dict:
    machine = get_machine(name)
    rows = [point(machine, k, planner) for k in range(0, len(layers) + 1, 8)]
    # the streaming engine: all on the CPU with nothing resident, streamed to the GPU from the first resident layer
    engine = [rows[0]["cpu"]] + [r["stream"] for r in rows[1:]]
    return {"machine": name, "rows": rows, "streaming_engine": engine, "u": engine[1] > engine[0],
            "link_bytes_per_s": machine.link.pinned_h2d_bytes_per_s, "cpu_bytes_per_s": machine.cpu.memory_bytes_per_s}


def draw(ax, c: dict) -> None:
    x = [r["fraction"] for r in c["rows"]]
    ax.plot(x, c["streaming_engine"], "o-", color="#1f77b4", label="rest streamed to the GPU (Accelerate); all on the CPU at 0")
    ax.plot(x, [r["cpu"] for r in c["rows"]], "s-", color="#ff7f0e", label="rest computed on the CPU (llama.cpp -ngl)")
    if all("planner" in r for r in c["rows"]):
        ax.plot(x, [r["planner"] for r in c["rows"]], "k^-", label="planner (mixes both)")
    beyond = [r["fraction"] for r in c["rows"] if not r["fits"]]
    if beyond:
        ax.axvspan(min(beyond), 1.0, color="grey", alpha=0.12, label="more VRAM than the GPU has (hypothetical)")
    verdict = "a U: streaming a few layers is slower than none" if c["u"] else "no U: streaming wins from the first layer"
    ax.set_title(f"{c['machine']}: link {c['link_bytes_per_s'] / 1e9:.1f} GB/s, CPU reads "
                 f"{c['cpu_bytes_per_s'] / 1e9:.0f} GB/s\n{verdict}", fontsize=8)
    ax.set_xlabel("fraction of decoder layers on the GPU")
    ax.set_yscale("log")


def draw_measured(ax, sweeps: list[dict]) -> list[dict]:
    out = []
    for s in sweeps:
        x = [n / (s["layers"] + 1) for n in s["ngl"]]  # llama.cpp counts the output head as one more layer
        ax.plot(x, s["time_per_token_s"], "o-", label=f"{s['arch']} ({s['layers']} blocks, {s['gguf_bytes'] / 1e9:.1f} GB)")
        t = s["time_per_token_s"]
        out.append({"arch": s["arch"], "falls": all(b <= a for a, b in zip(t, t[1:])), "ngl": s["ngl"], "time_per_token_s": t})
    ax.set_title("measured: llama-bench -ngl on h200-testbox\n(tokens from an empty context; no U)", fontsize=8)
    ax.set_xlabel("fraction of llama.cpp's layers on the GPU (-ngl / (blocks + 1))")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    return out


desk, h200 = curves("desktop-4090", planner=True), curves("h200-testbox", planner=False)
sweeps = json.loads(MEASURED.read_text())["sweeps"]
fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
draw(axes[0], desk)
draw(axes[1], h200)
axes[0].set_ylabel("time per token (s)")
axes[0].legend(fontsize=7, loc="lower left")
measured = draw_measured(axes[2], sweeps)
fig.suptitle("Llama-3.1-70B Q4, predicted (left, middle) and llama.cpp measured (right)", fontsize=10)
fig.tight_layout()
fig.savefig(figure("u_curve.png"), dpi=100)
for c in (desk, h200):
    e = c["streaming_engine"]
    up = [r["fraction"] for r, t in zip(c["rows"], e) if t > e[0]]
    print(f"{c['machine']}: all on the CPU {e[0]:.3f} s/token; streaming with {c['rows'][1]['gpu_layers']} GPU layers "
          f"{e[1]:.3f} s/token: " + (f"a U, streaming slower than none up to {max(up):.0%} of the layers on the GPU "
                                     f"(the link, {c['link_bytes_per_s'] / 1e9:.1f} GB/s, is slower than the CPU's "
                                     f"{c['cpu_bytes_per_s'] / 1e9:.0f} GB/s)" if c["u"] else
                                     f"no U (the link, {c['link_bytes_per_s'] / 1e9:.1f} GB/s, is faster than the "
                                     f"CPU's {c['cpu_bytes_per_s'] / 1e9:.0f} GB/s)"))
print("llama.cpp measured, time per token from -ngl 0 to all on the GPU: " + "; ".join(
    f"{m['arch']} {m['time_per_token_s'][0] * 1e3:.1f} -> {m['time_per_token_s'][-1] * 1e3:.1f} ms "
    f"({'falls at every step' if m['falls'] else 'not monotone'})" for m in measured))
result(rows=desk["rows"], u={c["machine"]: c["u"] for c in (desk, h200)},
       streaming_engine={c["machine"]: c["streaming_engine"] for c in (desk, h200)}, measured=measured)
