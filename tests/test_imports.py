"""Module boundaries: no import cycle among slca's modules, function-level imports included.

A function-level import can hide a cycle from Python (the import runs after both modules
have loaded) but not from a reader: the two modules still need each other. Imports of
heavy optional packages (torch, mlflow, vllm, ...) inside functions are fine; only
imports of slca's own modules are in the graph.

Importing ``slca.a.b`` runs ``slca/a/__init__.py`` first, so it is an edge to the
package ``slca.a`` too (unless the importer lives in that package, which is then
already loading). Imports under ``if TYPE_CHECKING:`` never run and are left out: an
annotation is not a dependency at import time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def modules(root: Path) -> dict[str, Path]:
    """Dotted name → file of every module and package under ``root/slca``."""
    found = {}
    for path in (root / "slca").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module an imported name lives in (``slca.a.b.func`` → ``slca.a.b``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the nodes under an ``if TYPE_CHECKING:`` block."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return skipped


def _packages_run(module: str, importer: str, known: dict[str, Path]) -> list[str]:
    """What importing ``module`` from ``importer`` loads: every enclosing package of
    ``module`` (its ``__init__`` runs first) that does not enclose ``importer``, and
    ``module`` itself."""
    parts = module.split(".")
    loaded = []
    for depth in range(2, len(parts) + 1):
        package = ".".join(parts[:depth])
        if package in known and not (importer + ".").startswith(package + "."):
            loaded.append(package)
    return loaded or [module]


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """Module → {slca module it imports: first line}, at any depth of the file."""
    known = modules(root)
    graph: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                if target == "slca" or target.startswith("slca."):
                    module = _resolve(target, known)
                    if module is None:
                        continue
                    for loaded in _packages_run(module, name, known):
                        if loaded != name:
                            edges.setdefault(loaded, node.lineno)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_slca_has_no_import_cycle():
    graph = import_graph()
    found = cycles(graph)
    detail = [
        f"{a} -> {b} (line {graph[a][b]})" for c in found for a in c for b in graph[a] if b in c
    ]
    assert not found, "import cycles:\n" + "\n".join(detail)


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    # the detector itself: a cycle hidden in a function, and one through a relative import
    pkg = tmp_path / "slca" / "pkg"
    pkg.mkdir(parents=True)
    (tmp_path / "slca" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import json\n\ndef f():\n    from slca.pkg.b import g\n")
    (pkg / "b.py").write_text("from .a import f\n\ndef g():\n    import torch\n")
    (pkg / "c.py").write_text("from slca.pkg import a\n")
    graph = import_graph(tmp_path)
    assert graph["slca.pkg.a"] == {"slca.pkg.b": 4}
    assert graph["slca.pkg.b"] == {"slca.pkg.a": 1}
    assert graph["slca.pkg.c"] == {"slca.pkg": 1, "slca.pkg.a": 1}
    assert cycles(graph) == [["slca.pkg.a", "slca.pkg.b"]]
    (pkg / "a.py").write_text("def f():\n    import torch\n")
    assert cycles(import_graph(tmp_path)) == []


@pytest.mark.parametrize(
    "module",
    ["slca.data.splits", "slca.rewards.scorers", "slca.data.sources.bfcl_backends"],
)
def test_moved_helpers_import_on_their_own(module):
    # each new home loads first in a fresh interpreter (no order-dependent partial import)
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, cwd=ROOT)


def test_the_graph_sees_package_inits_and_skips_type_checking(tmp_path):
    # importing a module of another package runs that package's __init__ first: the
    # cycle config.rewards -> rewards.scorers -> rewards/__init__ -> config.rewards
    for package in ("slca", "slca/config", "slca/rewards"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "slca" / "config" / "rewards.py").write_text("from slca.rewards.scorers import n\n")
    (tmp_path / "slca" / "rewards" / "__init__.py").write_text("from slca.rewards.score import s\n")
    (tmp_path / "slca" / "rewards" / "scorers.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from slca.config.rewards import C\n"
    )
    (tmp_path / "slca" / "rewards" / "score.py").write_text("from slca.config.rewards import C\n")
    graph = import_graph(tmp_path)
    assert graph["slca.config.rewards"] == {"slca.rewards": 1, "slca.rewards.scorers": 1}
    assert graph["slca.rewards.scorers"] == {}
    assert graph["slca.rewards.score"] == {"slca.config": 1, "slca.config.rewards": 1}
    assert cycles(graph) == [["slca.config.rewards", "slca.rewards", "slca.rewards.score"]]
    (tmp_path / "slca" / "rewards" / "__init__.py").write_text("from slca.rewards import scorers\n")
    assert cycles(import_graph(tmp_path)) == []
