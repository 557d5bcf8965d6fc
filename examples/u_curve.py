"""The U-curve: Llama-3.1-70B (Q4_K_M-like, 4.5 bits per weight) on a desktop with one RTX 4090 and 96 GB of DDR5.
Time per token against the fraction of layers kept on the GPU, for streaming the rest over PCIe, computing the rest
on the CPU (llama.cpp's way), and the planner's hybrid at the same VRAM. Writes u_curve.png."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from _common import figure, result  # noqa: E402
from hwmodels import get_machine  # noqa: E402
from planner import plan_with_report  # noqa: E402
from sim.model.formats import parse_format  # noqa: E402
from sim.costs.memory import PlanError, activation_bytes, kv_cache_bytes  # noqa: E402
from sim.plan import Budgets, Workload  # noqa: E402
from sim.engines.common import fit_slots, make_plan  # noqa: E402
from sim.run.simulate import fast_simulate  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402

machine = get_machine("desktop-4090")
model = load_model("llama-3.1-70b", parse_format("q4_k_m"))
w = Workload(prompt_tokens=64, new_tokens=4)
layers = [u for u in model.units if u.kind == "decoder"]
size = layers[0].nbytes
rows = []
for k in range(0, len(layers) + 1, 8):
    vram = k * size + 3 * size + kv_cache_bytes(model, w) + activation_bytes(model, w) + model.units[-1].nbytes
    # beyond the 4090's VRAM the points are hypothetical: the same machine with a GPU just large enough
    m = machine if vram <= machine.gpu.vram_bytes else \
        machine.model_copy(update={"gpu": machine.gpu.model_copy(update={"vram_bytes": vram})})
    b = Budgets.of(m, vram=vram)
    gpu = {u.name for u in layers[len(layers) - k:]} | {"lm_head"}
    stream = make_plan(model, m, "stream", {u.name: "vram" if u.name in gpu else "ram_pinned" for u in model.units},
                       {model.units[0].name: "cpu"}, prefetch_depth=2, vram_slots=3, pinned_slots=0)
    cpu = make_plan(model, m, "cpu", {u.name: "vram" if u.name in gpu else "ram_pinned" for u in model.units},
                    {u.name: "cpu" for u in model.units if u.name not in gpu}, prefetch_depth=0, vram_slots=1, pinned_slots=0)
    row = {"gpu_layers": k, "fraction": k / len(layers), "vram_bytes": vram}
    for name, plan in (("stream", stream), ("cpu", cpu)):
        try:
            row[name] = fast_simulate(model, m, fit_slots(model, plan, w, b, 3), w, b)["time_per_token_s"]
        except PlanError:
            row[name] = None
    rep = plan_with_report(model, m, w, b, confirm=False, time_budget_s=1.0)
    row["planner"] = fast_simulate(model, m, rep.plan, w, b)["time_per_token_s"] if rep.plan.feasible else None
    rows.append(row)
    print(f"{k:3d} GPU layers: stream {row['stream']:.3f}  cpu {row['cpu']:.3f}  planner {row['planner']:.3f} s/token")

fig, ax = plt.subplots(figsize=(7, 4.5))
for name, style in (("stream", "o-"), ("cpu", "s-"), ("planner", "k^-")):
    ax.plot([r["fraction"] for r in rows if r[name]], [r[name] for r in rows if r[name]], style, label=name)
cpu_only = rows[0]["cpu"]
ax.axhline(cpu_only, color="grey", ls=":", label="all on the CPU")
slower = [r["fraction"] for r in rows if r["stream"] and r["stream"] > cpu_only]
if slower:
    ax.axvspan(min(slower), max(slower), color="orange", alpha=0.2, label="streaming slower than CPU only")
fits = [r["fraction"] for r in rows if r["vram_bytes"] <= machine.gpu.vram_bytes]
ax.axvline(max(fits), color="red", lw=0.8, ls="--", label="beyond: more than the 4090's 24 GB (hypothetical)")
ax.set_xlabel("fraction of decoder layers resident on the GPU")
ax.set_ylabel("predicted time per token (s)")
ax.set_yscale("log")
ax.legend(fontsize=8)
ax.set_title("Llama-3.1-70B Q4 on desktop-4090", fontsize=9)
fig.tight_layout()
fig.savefig(figure("u_curve.png"), dpi=110)
print(f"Streaming the non-resident layers is slower than computing everything on the CPU until "
      f"{max(slower) if slower else 0:.0%} of the layers are resident: PCIe (23.9 GB/s) is slower than the "
      "CPU reading DDR5 (55 GB/s). The planner mixes both and is never above either curve.")
result(rows=rows, stream_slower_up_to=max(slower) if slower else 0.0)
