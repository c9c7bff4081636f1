"""benchmarks/*.py import one another without a cycle.

The scripts import their siblings two ways (``from _common import ...`` when run from
benchmarks/, ``from benchmarks.scifact import ...`` from the checkout root) and also by
``importlib.import_module("name")``; all three name the same module, so all three are edges.
Imports inside functions count too: a cycle hidden in a function still breaks whichever module
is imported first. The finder is shown to find a cycle on a synthetic pair of files.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

BENCH = ROOT / "benchmarks"


def _imported(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}  # from benchmarks import scifact
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return names


def import_graph(folder: Path) -> dict[str, set[str]]:
    """{module: sibling modules it imports} for every *.py in ``folder`` (``X`` and ``benchmarks.X``
    are both the sibling ``X``)."""
    mods = {p.stem: p for p in sorted(folder.glob("*.py"))}
    graph = {}
    for name, path in mods.items():
        out = set()
        for imp in _imported(ast.parse(path.read_text(encoding="utf-8"))):
            parts = imp.split(".")
            if parts[0] == folder.name:
                parts = parts[1:]
            if parts and parts[0] in mods and parts[0] != name:
                out.add(parts[0])
        graph[name] = out
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_finder_finds_a_cycle_hidden_in_a_function(tmp_path):
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "a.py").write_text("from benchmarks.b import f\n")
    (folder / "b.py").write_text("def f():\n    from a import g  # only when called\n    return g\n")
    (folder / "c.py").write_text("import importlib\nimportlib.import_module('a')\n")
    (folder / "d.py").write_text("import json\nfrom benchmarks import c\n")
    graph = import_graph(folder)
    assert graph == {"a": {"b"}, "b": {"a"}, "c": {"a"}, "d": {"c"}}
    assert cycles(graph) == [["a", "b"]]
    (folder / "b.py").write_text("def f():\n    return 1\n")
    assert cycles(import_graph(folder)) == []


def test_benchmarks_have_no_import_cycle():
    graph = import_graph(BENCH)
    assert "scifact" in graph["scifact_tuning"], "the finder no longer sees scifact_tuning's import of scifact"
    assert "_common" in graph["run_all"]
    assert not cycles(graph), f"import cycles among benchmarks/*.py: {cycles(graph)}"
