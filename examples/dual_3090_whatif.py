"""What a second GPU buys: Llama-3.1-70B (Q4_K_M) on the dual-3090 preset (two RTX 3090 on PCIe 4.0 x8/x8, 128 GB
DDR5), one GPU against two, at prompts of 4k, 32k and 128k tokens: `offloadsim whatif llama-3.1-70b --dtype q4_k_m
--machine dual-3090 --vary gpus=1,2 --vary context=4k,32k,128k`. Each bar is the fastest plan the planner finds
(the layers split over the GPUs, the KV cache placed), labelled with it. Writes dual_3090_whatif.png."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from _common import figure, result  # noqa: E402
from hwmodels import get_machine  # noqa: E402
from planner.sweep import Sweep, run  # noqa: E402
from sim.model.formats import parse_format  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402
from sim.plan import Workload  # noqa: E402

machine = get_machine("dual-3090")
model = load_model("llama-3.1-70b", parse_format("q4_k_m"))
contexts, gpus = ["4k", "32k", "128k"], ["1", "2"]
sweep = Sweep({model.name: model}, machine, Workload(new_tokens=3), {"gpus": gpus, "context": contexts})
rows = [r for chunk in run(sweep) for r in chunk]
at = {(r["combo"]["gpus"], r["combo"]["context"]): r for r in rows}

fig, ax = plt.subplots(figsize=(7, 3.4))
width = 0.38
for k, g in enumerate(gpus):
    xs = [i + (k - 0.5) * width for i in range(len(contexts))]
    ys = [at[(g, c)]["time_per_token_s"] if at[(g, c)]["feasible"] else 0.0 for c in contexts]
    bars = ax.bar(xs, ys, width, label=f"{g} x RTX 3090", color=("#9ecae1", "#08519c")[k])
    for b, c in zip(bars, contexts):
        r = at[(g, c)]
        ax.annotate(r.get("policy", "infeasible"), (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=6.5, rotation=90, xytext=(0, 2), textcoords="offset points")
ax.set_xticks(range(len(contexts)), [f"context {c}" for c in contexts])
ax.set_ylabel("predicted time per token (s)")
ax.set_ylim(0, 1.35 * max(r["time_per_token_s"] for r in rows if r["feasible"]))
ax.legend(fontsize=8, loc="upper left")
ax.set_title("Llama-3.1-70B Q4_K_M on dual-3090: one GPU or two, by context (whatif --vary gpus= --vary context=)",
             fontsize=8)
fig.tight_layout()
fig.savefig(figure("dual_3090_whatif.png"), dpi=100)
speed = {c: at[("1", c)]["time_per_token_s"] / at[("2", c)]["time_per_token_s"] for c in contexts}
print("second GPU speed-up of the time per token: " + ", ".join(f"{c} {s:.2f}x" for c, s in speed.items()))
result(rows=[{"gpus": g, "context": c, "time_per_token_s": at[(g, c)].get("time_per_token_s"),
              "policy": at[(g, c)].get("policy")} for g in gpus for c in contexts], speedup=speed)
