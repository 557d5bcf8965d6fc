"""Qwen3-14B (BF16, 29.5 GB) on an RTX 3080 Laptop (8 GB, PCIe 4.0, laptop NVMe, 32 GB RAM), cold cache: every
policy and the planner across VRAM budgets from the minimum to 8 GB, and where added memory pays most.
Writes laptop_qwen3_14b.png."""
import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from _common import figure, result  # noqa: E402
from hwmodels import get_machine  # noqa: E402
from planner import plan_with_report  # noqa: E402
from sim.costs.memory import PlanError, min_vram_bytes  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402
from sim.plan import Budgets, Workload  # noqa: E402
from sim.engines.placements import POLICIES  # noqa: E402
from sim.run.simulate import fast_simulate  # noqa: E402

machine, model = get_machine("rtx3080-laptop"), load_model("qwen3-14b")
w = Workload(prompt_tokens=128, new_tokens=8, warm=False)
budgets = np.linspace(min_vram_bytes(model, w), 8e9, 7).astype(int)
curves = {name: [] for name in ("airllm", "accelerate", "llamacpp", "stream", "planner")}
for v in budgets:
    b = Budgets.of(machine, vram=int(v))
    for name in ("airllm", "accelerate", "llamacpp", "stream"):
        try:
            curves[name].append(fast_simulate(model, machine, POLICIES[name](model, machine, w, b), w, b)["time_per_token_s"])
        except PlanError:
            curves[name].append(None)
    rep = plan_with_report(model, machine, w, b, confirm=False, time_budget_s=0.8)
    curves["planner"].append(fast_simulate(model, machine, rep.plan, w, b)["time_per_token_s"])
    print(f"VRAM {v / 1e9:4.1f} GB: " + "  ".join(f"{k} {c[-1]:.3f}" if c[-1] else f"{k} -" for k, c in curves.items()))

fig, ax = plt.subplots(figsize=(7, 4.5))
for name, c in curves.items():
    xs = [b / 1e9 for b, t in zip(budgets, c) if t]
    ax.plot(xs, [t for t in c if t], "k^-" if name == "planner" else "o-", label=name, lw=2.5 if name == "planner" else 1)
ax.set_yscale("log")
ax.set_xlabel("VRAM budget (GB)")
ax.set_ylabel("predicted time per token (s), cold start")
ax.legend(fontsize=8)
ax.set_title("Qwen3-14B on rtx3080-laptop", fontsize=9)
fig.tight_layout()
fig.savefig(figure("laptop_qwen3_14b.png"), dpi=110)
p = curves["planner"]
gains = [(p[i] - p[i + 1]) / ((budgets[i + 1] - budgets[i]) / 1e9) for i in range(len(p) - 1)]
best = int(np.argmax(gains))
print(f"The first GBs pay most: from {budgets[best] / 1e9:.1f} to {budgets[best + 1] / 1e9:.1f} GB the planner gains "
      f"{gains[best] * 1e3:.0f} ms per token per GB; at 8 GB it runs {p[-1]:.3f} s/token, "
      f"{min(c[-1] for k, c in curves.items() if k != 'planner' and c[-1]) / p[-1]:.2f}x faster than the best engine policy.")
result(budgets=budgets.tolist(), curves=curves, best_gain_from_bytes=int(budgets[best]))
