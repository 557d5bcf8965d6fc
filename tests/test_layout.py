"""The layout shows the data flow: hwmodels -> sim -> planner -> validate, no import cycles, no project imports
hidden inside library functions, and neither tests nor the product import the lab."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("hwmodels", "sim", "planner", "validate")
PROJECT = LIBRARY + ("offloadsim", "lab", "benchmarks", "tests", "examples")
LAYER = {"hwmodels": 0, "sim": 1, "planner": 2, "validate": 3, "offloadsim": 4}


def _modules(packages) -> dict[str, ast.Module]:
    out = {}
    for pkg in packages:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(f.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = ast.parse(f.read_text(), str(f))
    return out


def _imported(node) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return []


def _module_level(tree: ast.Module) -> list[str]:
    return [m for n in tree.body for m in _imported(n)]


def _resolve(name: str, modules) -> str | None:
    """The project module an import names (a `from pkg import module` names pkg)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def test_no_import_cycles_among_the_product_modules():
    mods = _modules(LIBRARY + ("offloadsim",))
    g = nx.DiGraph()
    for name, tree in mods.items():
        g.add_node(name)
        for imp in _module_level(tree):
            target = _resolve(imp, mods)
            if target and target != name:
                g.add_edge(name, target)
    assert list(nx.simple_cycles(g)) == []


def test_library_functions_import_nothing_of_the_project():
    hidden = []
    for name, tree in _modules(LIBRARY).items():
        top = set(tree.body)
        for n in ast.walk(tree):
            if n not in top and any(m.split(".")[0] in PROJECT for m in _imported(n)):
                hidden.append(f"{name}:{n.lineno}")
    assert hidden == []


def test_imports_follow_the_data_flow():
    against = []
    for name, tree in _modules(LIBRARY + ("offloadsim",)).items():
        mine = LAYER[name.split(".")[0]]
        for n in ast.walk(tree):
            for m in _imported(n):
                top = m.split(".")[0]
                if top in ("lab", "benchmarks", "tests", "examples") or LAYER.get(top, -1) > mine:
                    against.append(f"{name} imports {m}")
    assert against == []


def test_tests_never_import_the_lab_or_the_benchmarks():
    found = [f"{name} imports {m}" for name, tree in _modules(("tests",)).items() for n in ast.walk(tree)
             for m in _imported(n) if m.split(".")[0] in ("lab", "benchmarks")]
    assert found == []
