"""Does a thread copying tensors get anywhere while the main thread runs `gc.collect()`? (AirLLM's loader thread
against its per-module cleanup; lab/journal/peers.md, twenty-fourth session, sim.run.schedule.airllm_loader_wait_s.)

The main thread builds a model on the meta device (as AirLLM's process does: some 380-450 thousand objects for
the collector to walk), then, three times: a thread starts cloning eight 8 MiB tensors (each clone releases the
interpreter's lock while it copies; the thread stamps the time after each) and 2 ms later the main thread collects.
It prints how many of the thread's copies finished during the collection, and the thread's time alone.

    python lab/probes/gil_probe.py
"""
from __future__ import annotations

import argparse
import gc
import threading
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from validate.archs import arch_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="llama-1b")
    ap.add_argument("--trials", type=int, default=3)
    a = ap.parse_args()
    _, cfg = arch_config(a.arch)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
    torch.set_num_threads(1)
    src = [torch.empty(2**23, dtype=torch.uint8).fill_(i) for i in range(8)]
    stamps: list[float] = []

    def loader() -> None:
        for t in src:
            t.clone()
            stamps.append(time.perf_counter())

    print(f"{len(gc.get_objects())} objects tracked ({type(model).__name__} on meta)")
    for _ in range(a.trials):
        stamps.clear()
        th = threading.Thread(target=loader)
        t0 = time.perf_counter()
        th.start()
        time.sleep(0.002)
        g0 = time.perf_counter()
        gc.collect()
        g1 = time.perf_counter()
        th.join()
        done = sum(g0 <= s <= g1 for s in stamps)
        print(f"collection {1e3 * (g1 - g0):.0f} ms: the thread finished {done} of {len(stamps)} copies during it, "
              f"all {len(stamps)} after {1e3 * (stamps[-1] - t0):.0f} ms")
    stamps.clear()
    t0 = time.perf_counter()
    loader()
    print(f"the thread's copies alone: {1e3 * (time.perf_counter() - t0):.0f} ms")


if __name__ == "__main__":
    main()
