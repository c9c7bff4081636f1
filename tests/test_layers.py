"""The package's layers point one way (adiyan/__init__.py documents them) and no import cycles.

The test reads every module's imports from its source (module-level and inside functions), so
an import hidden in a function cannot hide a cycle or an upward dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import adiyan

PKG = Path(adiyan.__file__).resolve().parent
MAX_LINES = 600


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


MODULES = _modules()


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    if node.level:
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    out = []
    for alias in node.names:  # "from adiyan.eval import metrics" imports the module adiyan.eval.metrics
        sub = f"{target}.{alias.name}"
        out.append(sub if sub in MODULES else target)
    return out


def imports_of(module: str) -> list[tuple[str, bool, int, str]]:
    """(imported module, at module level?, line, source line) for every import in ``module``."""
    path = MODULES[module]
    src = path.read_text(encoding="utf-8")
    lines = src.splitlines()
    tree = ast.parse(src)
    is_pkg = path.name == "__init__.py"
    top_level = {id(n) for n in tree.body}
    for n in tree.body:  # imports under a module-level if/try count as module level
        if isinstance(n, (ast.If, ast.Try)):
            top_level |= {id(m) for m in ast.walk(n)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = _resolve(module, is_pkg, node)
        else:
            continue
        for name in names:
            out.append((name, id(node) in top_level, node.lineno, lines[node.lineno - 1]))
    return out


def layer_of(module: str) -> int:
    best, best_len = None, -1
    for prefix, layer in adiyan.LAYERS.items():
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
            best, best_len = layer, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer of adiyan.LAYERS; add it where it belongs")
    return best


def test_every_module_has_a_layer():
    for module in MODULES:
        if module != "adiyan":
            layer_of(module)


def test_no_upward_import():
    upward = []
    for module in MODULES:
        if module == "adiyan":
            continue
        mine = layer_of(module)
        for target, _, line, _ in imports_of(module):
            if target.startswith("adiyan.") and target in MODULES and layer_of(target) > mine:
                upward.append(f"{module}:{line} (layer {mine}) imports {target} (layer {layer_of(target)})")
    assert not upward, "imports that point up the layers:\n" + "\n".join(upward)


def test_no_import_cycles():
    graph = {m: sorted({t for t, *_ in imports_of(m) if t in MODULES and t != m and not m.startswith(t + ".")})
             for m in MODULES}
    # Tarjan's strongly connected components
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                sccs.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not sccs, f"import cycles: {sccs}"


def test_package_imports_are_module_level():
    """Function-level imports only for heavy optional dependencies, each with a comment saying so."""
    bad = []
    for module in MODULES:
        for target, top, line, text in imports_of(module):
            if top:
                continue
            if target.startswith("adiyan"):
                bad.append(f"{module}:{line}: package import inside a function: {text.strip()}")
            elif "#" not in text:
                bad.append(f"{module}:{line}: function-level import without a comment saying why: {text.strip()}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_library_module_over_600_lines(module):
    n = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{module} has {n} lines (limit {MAX_LINES}): split it by responsibility"
