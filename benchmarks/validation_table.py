"""Render docs/validation.md's table from a validation.json written by benchmarks/h200_validation.py.
Run: python benchmarks/validation_table.py docs/validation/validation.json"""
from __future__ import annotations

import json
import sys


def table(d: dict) -> str:
    lines = ["| plan | cold | predicted s/token | measured s/token | error | predicted TTFT | measured TTFT | tokens & logits bit-identical |",
             "|---|---|---|---|---|---|---|---|"]
    for r in d["plans"]:
        if "error" in r:
            lines.append(f"| {r['label']} | | failed: {r['error'][:80]} | | | | | |")
            continue
        ex = r.get("exactness", {})
        same = "yes" if ex.get("logits_bit_identical") else f"tokens {'yes' if ex.get('tokens_identical') else 'no'}, logits differ by {ex.get('max_abs_logit_diff', float('nan')):.3g}"
        lines.append(f"| {r['label']} | {'yes' if r['cold'] else 'no'} | {r['predicted']['time_per_token_s']:.4f} | "
                     f"{r['measured']['time_per_token_s']:.4f} | {r['error_pct']['time_per_token']:+.1f}% | "
                     f"{r['predicted']['ttft_s']:.3f} | {r['measured']['ttft_s']:.3f} | {same} |")
    s = d["summary"]
    lines.append("")
    lines.append(f"Median absolute error of the time per token: **{s['median_abs_error_pct']:.1f}%**; worst "
                 f"**{s['worst_abs_error_pct']:.1f}%** over {s['plans']} plans.")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(json.load(open(sys.argv[1]))))
