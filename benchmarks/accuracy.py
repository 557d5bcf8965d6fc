"""The accuracy page: every recorded H200 run under lab/data/ re-predicted by today's code, written to
docs/accuracy.md and to the README's table between its accuracy markers.

    python benchmarks/accuracy.py            # write both
    python benchmarks/accuracy.py --check    # exit 1 naming what differs when either is not what data and code give

The inputs and the runs that fit llama.cpp's costs are named below; the logic is validate.accuracy's.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hwmodels.units import InputError
from validate.accuracy import hf_peers, llamacpp, matrix
from validate.accuracy.families import rounds_of_rows, table
from validate.accuracy.page import ORDER, render_page, render_readme, with_table

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "accuracy.md"
README = ROOT / "README.md"
DATA = ROOT / "lab" / "data"
MATRIX = [DATA / "validation" / "matrix" / f"matrix-{c}.json" for c in "bcdefghijklmnopq"]
PEERS = [DATA / "peers" / f"peers-{c}.json" for c in "bcdefghijklmnopqrstuvwx"]
LLAMACPP = [DATA / "peers" / f"llamacpp-{c}.json" for c in (
    "a b e f g h i j k l m n o p q r s t u v w x y z aa ab ac ad ae af ag ah ai aj ak al am an ao ap aq").split()]
LLAMACPP_FIT = llamacpp.FitNames(
    fit=("llamacpp-a.json:llama-8b", "llamacpp-j.json:qwen3-0.6b", "llamacpp-j.json:llama-1b",
         "llamacpp-i.json:qwen3-4b", "llamacpp-m.json:llama-1b", "llamacpp-p.json:llama-1b",
         "llamacpp-q.json:llama-1b", "llamacpp-s.json:llama-1b", "llamacpp-z.json:llama-1b"),
    split=("llamacpp-u.json:smollm-135m", "llamacpp-u.json:llama-70b"), moe=("llamacpp-ae.json:moe-64x8",),
    pinned=("llamacpp-ae.json:llama-1b",))
NOT_REGENERATED = [
    "`lab/data/validation/matrix/matrix-a-first-code.json`: its profile's compute grids lack fields today's "
    "machine model requires (each grid's unit size).",
    "`lab/data/validation/validation.json`, `run2-sequence-fit/`, `run3-final/`, `accelerate-like-4GiB.json`, "
    "`llamacpp-like-4GiB.json`, `airllm.json`: the first single-workload runs, recorded without the shape, plan "
    "and budgets of each run.",
    "`lab/data/peers/peers-a.json`: every timed decode step paid cuDNN's plan for a new KV length "
    "(lab/journal/peers.md, 'Found on the way'); left out.",
    "llama.cpp runs the engine model does not price as run: other thread counts, exported plans of the -ot form, "
    "several sequences each with its own KV cache.",
]


def generate() -> tuple[str, str]:
    """(the page, the README's table) from the data and today's code."""
    m = matrix.read_matrix(MATRIX)
    peer_rows = hf_peers.read_hf_peers(PEERS)
    lc_rows, lc_rounds = llamacpp.read_llamacpp(LLAMACPP, LLAMACPP_FIT)
    rounds = {**rounds_of_rows(list(m.rows)), **rounds_of_rows(peer_rows), **lc_rounds}
    rows = list(m.rows) + peer_rows + lc_rows
    by_file = {matrix.GPU, matrix.CPU, matrix.PLANNER}  # each call ran offloadsim's engine of its day
    tables = [table(f, rows, rounds, f in by_file) for f in ORDER if any(r.family == f for r in rows)]
    notes = NOT_REGENERATED + [f"{len(m.not_regenerated)} matrix runs whose executed copies and computes differ "
                               "from today's schedule of their plan (the llama.cpp-like placement run with the "
                               "schedule of its day): " + "; ".join(sorted(m.not_regenerated)) + "."]
    return render_page(tables, notes), render_readme(tables)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    a = ap.parse_args()
    try:
        page, short = generate()
        readme = with_table(README.read_text(), short)
    except InputError as exc:
        print(f"accuracy: {exc}", file=sys.stderr)
        return 2
    if a.check:
        stale = [str(p.relative_to(ROOT)) for p, text in ((PAGE, page), (README, readme))
                 if not p.exists() or p.read_text() != text]
        if stale:
            print(f"accuracy: {' and '.join(stale)} differ from what lab/data and today's code give; run "
                  "python benchmarks/accuracy.py and commit.", file=sys.stderr)
            return 1
        print("accuracy: docs/accuracy.md and the README's table match the data and the code.")
        return 0
    PAGE.write_text(page)
    README.write_text(readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
