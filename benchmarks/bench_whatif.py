"""What-if speed: a 10,000-combination grid (10 storage x 10 VRAM x 25 RAM x 4 links) for
qwen3-14b on rtx3080-laptop, planned (quick planner) and predicted (fast evaluator), on 2 worker processes.
Run: python benchmarks/bench_whatif.py"""
from __future__ import annotations

import json
import time

from hwmodels import get_machine
from planner.whatif import grid
from sim.model.resolve import load_model
from sim.plan import Workload

if __name__ == "__main__":
    vary = {
        "storage": ["laptop-nvme", "sata", "nvme-gen3", "nvme-gen4", "nvme-gen5", "dc-gen4", "dc-gen5", "raid0-4x-gen4",
                    "raid0-4x-gen5", "cloud-ssd"],
        "vram": [f"{v}GiB" for v in (2, 3, 4, 5, 6, 7, 8, 10, 12, 16)],
        "ram": [f"{v}GiB" for v in range(16, 416, 16)],
        "link": ["pcie3", "pcie4", "pcie5", "pcie6"],
    }
    model, machine = load_model("qwen3-14b"), get_machine("rtx3080-laptop")
    w = Workload(prompt_tokens=128, new_tokens=3)
    t = time.perf_counter()
    a = grid(model, machine, w, vary, workers=2)
    secs = time.perf_counter() - t
    n = len(a["rows"])
    print(json.dumps({"combinations": n, "seconds": secs, "per_combination_ms": secs / n * 1e3,
                      "top_upgrades": a["upgrades"][:5]}, indent=1))
