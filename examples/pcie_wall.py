"""Has the wall moved? VRAM bandwidth against host-link bandwidth across GPU generations (2016-2025), consumer and
datacenter cards apart. Writes pcie_wall.png and prints the ratio by generation."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from _common import figure, result  # noqa: E402
from offloadsim.hwreport import gap_rows  # noqa: E402

rows = gap_rows()
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for market, marker in (("consumer", "o"), ("datacenter", "s")):
    rs = [r for r in rows if r["market"] == market]
    axes[0].scatter([r["year"] for r in rs], [r["vram_bytes_per_s"] / 1e9 for r in rs], marker=marker, label=f"VRAM, {market}")
    axes[0].scatter([r["year"] for r in rs], [r["link_datasheet_bytes_per_s"] / 1e9 for r in rs], marker=marker,
                    facecolors="none", edgecolors="grey", label=f"host link (datasheet, the card's lanes), {market}")
    for r in rs:
        ratio = r["ratio_measured"] or r["ratio_datasheet"]
        axes[1].scatter(r["year"], ratio, marker=marker, color="C0" if market == "consumer" else "C3")
        axes[1].annotate(r["gpu"], (r["year"], ratio), fontsize=7, xytext=(3, 2), textcoords="offset points")
axes[0].set_yscale("log")
axes[0].set_ylabel("GB/s")
axes[0].legend(fontsize=7)
axes[1].set_yscale("log")
axes[1].set_ylabel("VRAM / host link (measured where published, else datasheet)")
axes[1].set_title("blue: consumer, red: datacenter", fontsize=9)
fig.suptitle("The host-to-GPU wall: VRAM bandwidth over PCIe bandwidth", fontsize=10)
fig.tight_layout()
fig.savefig(figure("pcie_wall.png"), dpi=110)

cons = [r["ratio_measured"] or r["ratio_datasheet"] for r in rows if r["market"] == "consumer"]
dc = [r["ratio_measured"] or r["ratio_datasheet"] for r in rows if r["market"] == "datacenter"]
print(f"consumer cards: VRAM is {min(cons):.0f}-{max(cons):.0f}x the host link; datacenter: {min(dc):.0f}-{max(dc):.0f}x.")
print("The wall has not moved on consumer cards (each PCIe generation doubled with VRAM); on datacenter cards HBM "
      "outgrew PCIe and the gap passed 100x with the B200.")
result(consumer_min=min(cons), consumer_max=max(cons), datacenter_max=max(dc), gpus=len(rows))
