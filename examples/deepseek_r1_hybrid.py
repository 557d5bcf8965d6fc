"""DeepSeek-R1 671B (4.5 bits per weight, as KTransformers runs it) the KTransformers way: attention, dense layers, shared experts and the embeddings on the
GPU, routed experts computed by the CPU from RAM (from disk when RAM runs out). xeon-4090 against desktop-4090, and
which single upgrade (RAM channels, CPU, GPU, SSD) helps most. Writes deepseek_r1_hybrid.png."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from _common import figure, result  # noqa: E402
from hwmodels import get_machine  # noqa: E402
from hwmodels.presets import get_part  # noqa: E402
from sim.model.formats import parse_format  # noqa: E402
from sim.model.resolve import load_model  # noqa: E402
from sim.plan import Budgets, Workload  # noqa: E402
from sim.engines.common import make_plan  # noqa: E402
from sim.run.simulate import fast_simulate  # noqa: E402

model = load_model("deepseek-r1", parse_format("q4_k_m"))
w = Workload(prompt_tokens=32, new_tokens=4)


def hybrid(machine):
    ram_left = machine.host_memory.capacity_bytes - 8 * 2**30
    tiers, compute = {}, {}
    for u in model.units:
        if u.kind == "expert":
            compute[u.name] = "cpu"
            if u.nbytes <= ram_left:
                tiers[u.name], ram_left = "ram_pageable", ram_left - u.nbytes
            else:
                tiers[u.name] = "disk_raw"
        else:
            tiers[u.name] = "vram"
    return make_plan(model, machine, "ktransformers-like", tiers, compute, prefetch_depth=1, vram_slots=1, pinned_slots=0)


def tokens_per_s(machine) -> float:
    b = Budgets.of(machine, ram=machine.host_memory.capacity_bytes)
    return 1.0 / fast_simulate(model, machine, hybrid(machine), w, b)["time_per_token_s"]


base = {name: tokens_per_s(get_machine(name)) for name in ("xeon-4090", "desktop-4090")}
for name, tps in base.items():
    print(f"{name}: {tps:.2f} tokens/s")
upgrades = {}
for name in base:
    m = get_machine(name)
    c, h = m.cpu, m.host_memory
    options = {
        "2x RAM channels": m.model_copy(update={"cpu": c.model_copy(update={"memory_bytes_per_s": 2 * c.memory_bytes_per_s}),
                                                "host_memory": h.model_copy(update={"bandwidth_bytes_per_s": 2 * h.bandwidth_bytes_per_s})}),
        "2x CPU FLOP/s": m.model_copy(update={"cpu": c.model_copy(update={"flops_per_s": 2 * c.flops_per_s})}),
        "RTX 5090 + PCIe 5": m.model_copy(update={"gpu": get_part("gpu", "rtx5090")[0], "link": get_part("link", "pcie5x16")[0]}),
        "Gen5 SSD": m.model_copy(update={"storage": get_part("storage", "nvme-gen5")[0]}),
        "RAID0 4x Gen5": m.model_copy(update={"storage": get_part("storage", "raid0-4x-gen5")[0]}),
        "2x RAM capacity": m.model_copy(update={"host_memory": h.model_copy(update={"capacity_bytes": 2 * h.capacity_bytes})}),
    }
    upgrades[name] = {k: tokens_per_s(v) / base[name] for k, v in options.items()}
    best = max(upgrades[name], key=upgrades[name].get)
    print(f"  {name}: best single upgrade {best} ({upgrades[name][best]:.2f}x); " +
          ", ".join(f"{k} {v:.2f}x" for k, v in upgrades[name].items()))

fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
for ax, name in zip(axes, base):
    ks = list(upgrades[name])
    ax.barh(ks, [upgrades[name][k] for k in ks])
    ax.axvline(1, color="black", lw=0.8)
    ax.set_title(f"{name}: {base[name]:.2f} tokens/s", fontsize=9)
    ax.set_xlabel("speedup")
fig.suptitle("DeepSeek-R1 671B at 4.5 bits, routed experts on the CPU", fontsize=10)
fig.tight_layout()
fig.savefig(figure("deepseek_r1_hybrid.png"), dpi=110)
for name in base:
    m = get_machine(name)
    experts = sum(u.nbytes for u in model.units if u.kind == "expert")
    in_ram = min(1.0, (m.host_memory.capacity_bytes - 8 * 2**30) / experts)
    best = max(upgrades[name], key=upgrades[name].get)
    print(f"{name}: {in_ram:.0%} of the routed experts ({experts / 1e9:.0f} GB) fit in RAM; the upgrade that helps most "
          f"is {best} ({upgrades[name][best]:.2f}x).")
result(tokens_per_s=base, upgrades=upgrades)
