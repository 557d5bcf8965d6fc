"""What-if speed: a 40-combination grid (5 VRAM x 4 RAM x 2 links) for qwen3-14b on rtx3080-laptop, each combination
planned by `plan`'s planner (planner.engines.plan_answer) and predicted.
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
        "vram": [f"{v}GiB" for v in (2, 3, 4, 5, 6)],
        "ram": [f"{v}GiB" for v in (16, 32, 64, 128)],
        "link": ["pcie3", "pcie4"],
    }
    model, machine = load_model("qwen3-14b"), get_machine("rtx3080-laptop")
    w = Workload(prompt_tokens=128, new_tokens=3)
    t = time.perf_counter()
    a = grid(model, machine, w, vary, workers=2)
    secs = time.perf_counter() - t
    n = len(a["rows"])
    print(json.dumps({"combinations": n, "seconds": secs, "per_combination_s": secs / n,
                      "top_upgrades": a["upgrades"][:5]}, indent=1))
