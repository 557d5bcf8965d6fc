"""The measured llama.cpp -ngl sweeps the U-curve example draws, extracted from the raw llama-bench records.

Writes examples/data/llamacpp_ngl_sweep.json: per architecture, each -ngl's time per generated token (the median of
a generation test's repetitions over its token count, from an empty context) and the file it came from.
Run: python lab/reports/llamacpp_ngl_extract.py
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = (("llamacpp-a.json", "llama-8b"), ("llamacpp-v.json", "qwen3-32b"), ("llamacpp-u.json", "llama-70b"),
          ("llamacpp-j.json", "qwen3-0.6b"))


def sweep(path: Path, arch: str) -> dict:
    data = json.loads(path.read_text())
    a = next(x for x in data["archs"] if x["arch"] == arch)
    by_ngl: dict[int, list[float]] = {}
    for r in a["llamacpp"]:
        if r.get("n_gen", 0) > 0 and r.get("n_prompt") == 0 and r.get("tensor_buft_overrides", "none") == "none" \
                and r.get("n_threads") in (16, 15):
            by_ngl.setdefault(r["n_gpu_layers"], []).extend(s / 1e9 / r["n_gen"] for s in r["samples_ns"])
    return {"arch": arch, "layers": a["layers"], "gguf_bytes": a["gguf_bytes"], "source": f"lab/data/peers/{path.name}",
            "date": data["date"], "host": "h200-testbox (one H200, PCIe 5.0 x16, 16 cores)",
            "ngl": sorted(by_ngl), "time_per_token_s": [statistics.median(by_ngl[n]) for n in sorted(by_ngl)]}


if __name__ == "__main__":
    out = ROOT / "examples" / "data" / "llamacpp_ngl_sweep.json"
    rows = [sweep(ROOT / "lab" / "data" / "peers" / f, arch) for f, arch in SWEEPS]
    out.write_text(json.dumps({"what": "llama-bench generation tests, median time per token by -ngl",
                               "written_by": "python lab/reports/llamacpp_ngl_extract.py", "sweeps": rows}, indent=1) + "\n")
    for r in rows:
        print(r["arch"], r["layers"], "layers:", ", ".join(f"-ngl {n} {t * 1e3:.1f} ms" for n, t in zip(r["ngl"], r["time_per_token_s"])))
