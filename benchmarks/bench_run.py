"""`offloadsim run`'s measured time per token against the plan's prediction, on this machine's GPU.

Writes a random-weight checkpoint (make-checkpoint; its tokenizer is character-level, so a prompt of P characters is
P tokens), plans it under a VRAM budget that forces streaming, then generates with offloadsim's runner several times
(greedy, every token made) and prints each run's first token and time per token beside the simulator's prediction
for the same request.

    python benchmarks/bench_run.py --machine h200-testbox --out /tmp/bench-run.json
    python benchmarks/bench_run.py --machine profile.json --preset qwen3-14b --layers 8 --vram 6GiB --repeats 5

`--machine` is what the plan and the prediction are made for: a preset, or better a `calibrate` profile of this host.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machine", default="h200-testbox", help="preset or profile JSON (calibrate) of this host")
    ap.add_argument("--preset", default="llama-3.1-8b", help="model preset whose shape the checkpoint takes")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vram", default="3GiB", help="VRAM budget of the plan (below the checkpoint's size: it streams)")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None, help="work folder (default: a temporary one); a checkpoint there is reused")
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=None, help="write the results as JSON")
    args = ap.parse_args()

    from offloadsim.cli import main as cli
    from validate.runner import Runner

    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-run-"))
    ckpt, plan = work / "ckpt", work / "plan.json"
    if not (ckpt / "config.json").exists():
        assert cli(["make-checkpoint", "--preset", args.preset, "--layers", str(args.layers), "--out", str(ckpt)]) == 0
    assert cli(["plan", str(ckpt), "--machine", args.machine, "--vram", args.vram, "--prompt-tokens",
                str(args.prompt_tokens), "--new-tokens", str(args.new_tokens), "--out", str(plan)]) == 0
    runner = Runner.load(ckpt, plan, args.machine, args.device)
    prompt = ("the weights stream from the disk " * (args.prompt_tokens // 32 + 1))[: args.prompt_tokens]
    runner.generate(prompt, 4, ignore_eos=True)  # first use: kernels and thread pools start
    rows = []
    for k in range(args.repeats):
        out = runner.generate(prompt, args.new_tokens, ignore_eos=True)
        p = out.predicted
        rows.append({"repeat": k, "prompt_tokens": out.prompt_tokens, "new_tokens": len(out.token_ids),
                     "ttft_s": out.ttft_s, "time_per_token_s": out.time_per_token_s,
                     "predicted_ttft_s": p["ttft_s"], "predicted_time_per_token_s": p["time_per_token_s"],
                     "error_pct": (p["time_per_token_s"] - out.time_per_token_s) / out.time_per_token_s * 100})
        r = rows[-1]
        print(f"run {k}: first token {r['ttft_s']:.4f} s (predicted {r['predicted_ttft_s']:.4f}), time per token "
              f"{r['time_per_token_s']:.5f} s (predicted {r['predicted_time_per_token_s']:.5f}, {r['error_pct']:+.1f}%)")
    med = statistics.median(r["time_per_token_s"] for r in rows)
    pred = rows[0]["predicted_time_per_token_s"]
    print(f"{args.preset} x{args.layers} layers, plan at --vram {args.vram} on {runner.engine.device} "
          f"({runner.machine.name}): median measured {med:.5f} s per token, predicted {pred:.5f} s "
          f"({(pred - med) / med * 100:+.1f}%)")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "device": str(runner.engine.device),
                                              "plan": json.loads(plan.read_text()), "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
