#!/usr/bin/env bash
# Install size and time of the README's first command: a fresh venv, `pip install -e SRC`, timed; the
# venv's size and package count. Usage: bash benchmarks/bench_install.sh [SRC ...]   (default: this checkout)
# "Before" figures: a tree from git, e.g. `git archive fe7abf5 | tar -x -C /tmp/before_src`, then pass /tmp/before_src.
set -euo pipefail
[ $# -gt 0 ] || set -- "$(cd "$(dirname "$0")/.." && pwd)"
for src in "$@"; do
  venv=$(mktemp -d)/v
  start=$(date +%s.%N)
  python3 -m venv "$venv" && "$venv/bin/pip" install -q -e "$src" > /dev/null 2>&1
  end=$(date +%s.%N)
  echo "$src time_s $(python3 -c "print(round($end - $start, 1))") size_mb $(du -sm "$venv" | cut -f1) packages $("$venv/bin/pip" list 2>/dev/null | tail -n +3 | wc -l)"
  rm -rf "$(dirname "$venv")"
done
