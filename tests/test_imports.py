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
import re
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
    [
        "slca.data.splits",
        "slca.rewards.scorers",
        "slca.data.sources.bfcl_backends",
        "slca.config.names",
        "slca.generation.vllm_engine",
        "slca.rollout.gold",
        "slca.data.ge",
    ],
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


# ---------------------------------------------------------------- floors (packages)

BASE = (
    "slca.atomic",
    "slca.attention",
    "slca.cpu_kernels",
    "slca.faults",
    "slca.grammar",
    "slca.jsonutil",
    "slca.locks",
    "slca.modeling",
    "slca.processes",
    "slca.progress",
    "slca.registry",
)
"""Top-level modules that are plumbing every floor may use: files, locks, processes,
progress reports, faults, the tool-call grammar, model loading and the attention it
sets, the CPU kernels pinned at import, the registry class."""

ALGORITHM = ("slca.advantages", "slca.group_stats", "slca.losses", "slca.segments")
"""Top-level modules of the RL arithmetic: segments, group statistics, estimators, loss."""

GROUPS = {"slca.base": BASE, "slca.algorithm": ALGORITHM}
"""Top-level modules grouped into one room each; a subpackage (``slca.data``) is its own
room, and so is a top-level module not named here (``slca.reference``)."""

LAYERS: list[tuple[str, ...]] = [
    ("slca.base",),
    ("slca.config",),
    ("slca.algorithm", "slca.data", "slca.generation", "slca.tracking"),
    ("slca.simulator",),
    ("slca.rollout",),
    ("slca.rewards",),
    ("slca.eval", "slca.reference"),
    ("slca.training",),
]
"""The floors of the library, bottom to top, as import-linter's ``layers`` contract
(which lists them top to bottom): a room may import rooms on lower floors only; rooms
on one floor are independent (neither imports the other). ``slca_pipeline`` (the
flows, and the ``slca`` command in ``slca_pipeline/cli.py``) stands above them all, and
nothing in ``slca/`` imports it. The configuration is the floor above the plumbing: it
imports no implementation (registries check names through ``slca/config/names.py``)."""


def room_of(module: str) -> str | None:
    """The room (group) a module belongs to; None for the root package ``slca`` (it
    only pins the CPU kernels)."""
    if module == "slca":
        return None
    top = ".".join(module.split(".")[:2])
    return next((room for room, members in GROUPS.items() if top in members), top)


def package_graph(graph: dict[str, dict[str, int]]) -> dict[str, dict[str, str]]:
    """Room → {room it imports: the first such import, ``module:line -> module``}."""
    rooms: dict[str, dict[str, str]] = {}
    for module, edges in sorted(graph.items()):
        here = room_of(module)
        if here is None:
            continue
        rooms.setdefault(here, {})
        for target, line in edges.items():
            there = room_of(target)
            if there is not None and there != here:
                rooms[here].setdefault(there, f"{module}:{line} -> {target}")
    return rooms


def floor_violations(
    rooms: dict[str, dict[str, str]], layers: list[tuple[str, ...]] = LAYERS
) -> list[str]:
    """Every room on no floor, and every import that does not go down a floor."""
    floor = {room: level for level, members in enumerate(layers) for room in members}
    found = [f"{room} is on no floor (add it to LAYERS)" for room in rooms if room not in floor]
    for room, edges in sorted(rooms.items()):
        for target, where in sorted(edges.items()):
            if room in floor and target in floor and floor[target] >= floor[room]:
                how = "a sibling on its floor" if floor[target] == floor[room] else "upstairs"
                found.append(f"{room} imports {target} ({how}): {where}")
    return found


def test_no_cycle_between_slca_packages():
    rooms = package_graph(import_graph())
    found = cycles(rooms)
    detail = [f"{a} -> {b}: {rooms[a][b]}" for c in found for a in c for b in rooms[a] if b in c]
    assert not found, "package-level import cycles:\n" + "\n".join(detail)


def test_imports_only_go_down_the_floors():
    assert floor_violations(package_graph(import_graph())) == []


def test_the_floors_name_every_room_once():
    placed = [room for members in LAYERS for room in members]
    assert len(placed) == len(set(placed))
    known = modules(ROOT)
    assert set(BASE + ALGORITHM) <= set(known)
    assert {room_of(m) for m in known} - {None} == set(placed)


def test_configuration_imports_no_implementation():
    rooms = package_graph(import_graph())
    assert set(rooms["slca.config"]) == set(), rooms["slca.config"]


def slca_pipeline_imports(root: Path = ROOT) -> list[str]:
    """Every import of ``slca_pipeline`` in ``slca/`` (at any depth of a file), and every
    string that is the name of one of its modules (``importlib``, ``python -m``)."""
    module_name = re.compile(r"slca_pipeline(\.\w+)*(:\w+)?")
    found = []
    for name, path in sorted(modules(root).items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                targets = [node.value] if module_name.fullmatch(node.value) else []
            else:
                continue
            for target in targets:
                if target.partition(":")[0].split(".")[0] == "slca_pipeline":
                    found.append((name, node.lineno, target))
    return [f"{name}:{line} -> {target}" for name, line, target in sorted(found)]


def test_the_library_imports_nothing_from_the_orchestration():
    assert slca_pipeline_imports() == []


def test_the_floor_checks_see_packages_upstairs_and_siblings(tmp_path):
    # the detectors themselves, on a made-up tree: data imports rollout (upstairs), a
    # cycle between the two, a string naming slca_pipeline, and a sibling import
    for package in ("slca", "slca/data", "slca/rollout", "slca/tracking"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "slca" / "data" / "splits.py").write_text(
        "def fit():\n    from slca.rollout.chat import render\n"
    )
    (tmp_path / "slca" / "rollout" / "chat.py").write_text("from slca.data import splits\n")
    (tmp_path / "slca" / "tracking" / "store.py").write_text(
        "import subprocess\n\ndef ui():\n"
        "    subprocess.run(['python', '-m', 'slca_pipeline.server'])\n"
        "\ndef f():\n    import slca_pipeline.flows\n"
    )
    rooms = package_graph(import_graph(tmp_path))
    assert rooms["slca.data"] == {"slca.rollout": "slca.data.splits:2 -> slca.rollout"}
    assert cycles(rooms) == [["slca.data", "slca.rollout"]]
    layers = [("slca.data", "slca.tracking"), ("slca.rollout",)]
    assert floor_violations(rooms, layers) == [
        "slca.data imports slca.rollout (upstairs): slca.data.splits:2 -> slca.rollout"
    ]
    assert floor_violations(rooms, [("slca.data", "slca.rollout")])[0].startswith(
        "slca.tracking is on no floor"
    )
    assert floor_violations({"slca.data": {"slca.tracking": "x"}}, layers) == [
        "slca.data imports slca.tracking (a sibling on its floor): x"
    ]
    assert slca_pipeline_imports(tmp_path) == [
        "slca.tracking.store:4 -> slca_pipeline.server",
        "slca.tracking.store:7 -> slca_pipeline.flows",
    ]
