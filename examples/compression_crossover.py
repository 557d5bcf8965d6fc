"""Eq. (2) as a map: where lossless compression (stored at 0.71 of BF16) shortens the time to a ready weight, over
storage speed x unpack speed, with real machines' disks and measured codecs marked. Writes compression_crossover.png."""
import json
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from _common import figure, result  # noqa: E402
from hwmodels import get_machine, list_machines  # noqa: E402
from sim.costs.equations import compression_pays  # noqa: E402

RATIO = 0.71  # byte-plane zstd on BF16, measured on the H200 run (lab/data/validation/profile.json)
S = 1e9
disk = np.logspace(np.log10(0.3e9), np.log10(60e9), 200)
unpack = np.logspace(np.log10(0.3e9), np.log10(60e9), 200)
D, U = np.meshgrid(disk, unpack)
gain = (S / D) / (S * RATIO / D + S / U)  # raw read time over compressed read + unpack (before the copy)
pays = np.vectorize(lambda d, u: compression_pays(S, S * RATIO, d, S / u))(D, U)
assert np.array_equal(pays, gain > 1)

fig, ax = plt.subplots(figsize=(7, 5.5))
cs = ax.contourf(D / 1e9, U / 1e9, gain, levels=[0.2, 0.5, 0.8, 1.0, 1.1, 1.2, 1.3, 1.41], cmap="RdYlGn")
ax.contour(D / 1e9, U / 1e9, gain, levels=[1.0], colors="black", linewidths=2)
fig.colorbar(cs, label="speedup of read+unpack over a raw read")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("storage read speed (GB/s)")
ax.set_ylabel("unpack speed, all threads (GB/s)")
for name in list_machines():
    m = get_machine(name)
    ax.axvline(m.storage.cold_read_bytes_per_s / 1e9, color="grey", lw=0.6, ls=":")
    ax.text(m.storage.cold_read_bytes_per_s / 1e9, 0.35, name, rotation=90, fontsize=7)
    ax.axvline(m.storage.cache_read_bytes_per_s / 1e9, color="grey", lw=0.4, ls="--")
prof = Path(__file__).resolve().parent.parent / "docs" / "validation" / "profile.json"
codecs = {"zstd 1 thread (2-core dev box, lab/data/reference/peer-engines.md)": 1.3e9}
if prof.exists():
    c = json.loads(prof.read_text())["calibration"]["measurements"]["codec"]
    codecs.update({f"zstd {k.split('_')[1][:-7]} threads (H200 calibrate)": v for k, v in c.items() if k.startswith("decode_")})
for label, u in codecs.items():
    ax.axhline(u / 1e9, color="navy", lw=0.8)
    ax.text(0.32, u / 1e9 * 1.04, label, fontsize=7, color="navy")
ax.set_title(f"eq. (2): compression at {RATIO} pays above the black line", fontsize=9)
fig.tight_layout()
fig.savefig(figure("compression_crossover.png"), dpi=110)

crossover = {n: get_machine(n).storage.cold_read_bytes_per_s / (1 - RATIO) for n in list_machines()}
for n, u in crossover.items():
    print(f"{n:<16} cold disk {get_machine(n).storage.cold_read_bytes_per_s / 1e9:5.2f} GB/s: compression pays when "
          f"unpacking beats {u / 1e9:5.1f} GB/s")
print("Compression pays only on slow storage with fast, parallel unpacking; from the page cache it almost never does.")
result(ratio=RATIO, crossover_bytes_per_s=crossover)
