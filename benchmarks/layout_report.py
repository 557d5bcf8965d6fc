"""The shape of the house, measured: import cycles, project imports hidden in library functions, engine branches in
the core, history labels in the product, the README's first commands, the largest modules and functions.

    python benchmarks/layout_report.py [--json]
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("hwmodels", "sim", "planner", "validate")
PRODUCT = LIBRARY + ("offloadsim",)
CORE = ("sim/run", "sim/costs", "sim/model", "sim/analysis", "sim/plan.py", "planner", "offloadsim")
ENGINE_NAMES = ("llamacpp", "airllm", "accelerate")
LABELS = re.compile(r"\b[Cc]alls? [A-Z]{1,2}\b|\b[a-z]+-?(?:first|second|third|[a-z]*th|[a-z]*st|[a-z]*nd|[a-z]*rd) "
                    r"sessions?\b|\bsessions? [0-9]+\b|\b[Ii]ssue [0-9]+\b|\bthe lent host\b")


def modules(packages) -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for pkg in packages:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            out[name] = (f, ast.parse(f.read_text(), str(f)))
    return out


def imported(node) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return []


def cycles(mods) -> list[list[str]]:
    g = nx.DiGraph()
    for name, (_, tree) in mods.items():
        for n in tree.body:
            for m in imported(n):
                while m and m not in mods:
                    m = m.rpartition(".")[0]
                if m and m != name:
                    g.add_edge(name, m)
    return list(nx.simple_cycles(g))


def hidden_imports(mods) -> list[str]:
    out = []
    for name, (_, tree) in mods.items():
        if name.split(".")[0] not in LIBRARY:
            continue
        top = set(tree.body)
        out += [f"{name}:{n.lineno}" for n in ast.walk(tree) if n not in top
                and any(m.split(".")[0] in PRODUCT for m in imported(n))]
    return out


def engine_branches(mods) -> list[str]:
    """String literals naming a peer engine in the core (outside sim/engines and validate)."""
    out = []
    for name, (f, tree) in mods.items():
        rel = f.relative_to(ROOT).as_posix()
        if not rel.startswith(CORE):
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in ENGINE_NAMES:
                out.append(f"{rel}:{n.lineno} {n.value!r}")
    return out


def schedule_branches() -> int:
    f = ROOT / "sim" / "run" / "schedule.py"
    text = f.read_text() if f.exists() else ""
    return text.count("peer is None") + text.count("peer is not None") + len(re.findall(r"engine ==", text))


def labels() -> list[str]:
    files = [p for pkg in PRODUCT + ("examples", "benchmarks") for p in (ROOT / pkg).rglob("*") if p.suffix in
             (".py", ".toml", ".md")] + [ROOT / "README.md"] + list((ROOT / "docs").rglob("*.md"))
    out = []
    for p in files:
        for i, line in enumerate(p.read_text().splitlines(), 1):
            out += [f"{p.relative_to(ROOT)}:{i} {m.group(0)!r}" for m in LABELS.finditer(line)]
    return out


def sizes(mods) -> dict:
    lines = sorted(((len(f.read_text().splitlines()), name) for name, (f, _) in mods.items()), reverse=True)
    funcs = []
    for name, (_, tree) in mods.items():
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = n.args
                bound = bool(a.args) and a.args[0].arg in ("self", "cls")
                params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) - bound
                funcs.append((n.end_lineno - n.lineno + 1, params, f"{name}.{n.name}"))
    return {"largest_modules": lines[:5], "longest_functions": sorted(funcs, reverse=True)[:5],
            "most_parameters": sorted(funcs, key=lambda x: (-x[1], x[2]))[:5],
            "functions_over_60_lines": sum(f[0] > 60 for f in funcs),
            "functions_over_8_parameters": sum(f[1] > 8 for f in funcs)}


def readme_command_lines() -> list[int]:
    text = (ROOT / "README.md").read_text().splitlines()
    return [i for i, line in enumerate(text, 1) if "pip install" in line and not line.startswith("#")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    mods = modules(PRODUCT)
    rep = {"import_cycles": cycles(mods), "hidden_project_imports": hidden_imports(mods),
           "schedule_engine_branches": schedule_branches(), "engine_literals_in_core": engine_branches(mods),
           "history_labels": labels(), "readme_install_lines": readme_command_lines(), **sizes(mods)}
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    for k, v in rep.items():
        if isinstance(v, list) and v and k not in ("readme_install_lines", "largest_modules", "longest_functions",
                                                   "most_parameters"):
            print(f"{k}: {len(v)}")
            for x in v[:8]:
                print(f"   {x}")
        else:
            print(f"{k}: {v if not isinstance(v, list) or v else 0}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
