"""The size limits of issue 18 and issue 38: no module in ``slca/`` over 500 lines and
no function over 80 (docs/adr/0079-short-training-functions-and-one-engine-check.md).
A function that must be longer is split by duty instead; the limits hold for every
file, so a new long function fails here, not in a later review."""

import ast
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parents[1] / "slca"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def sizes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """(module → lines, ``module:function`` → lines) of every Python file under ``root``."""
    modules, functions = {}, {}
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        name = str(path.relative_to(root.parent))
        modules[name] = len(source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                key = f"{name}:{node.name}:{node.lineno}"
                functions[key] = node.end_lineno - node.lineno + 1
    return modules, functions


def test_no_module_or_function_of_the_library_is_over_its_limit():
    modules, functions = sizes(LIBRARY)
    assert len(modules) > 100  # the walk found the library
    assert {m: n for m, n in modules.items() if n > MAX_MODULE_LINES} == {}
    assert {f: n for f, n in functions.items() if n > MAX_FUNCTION_LINES} == {}


@pytest.mark.parametrize(("body_lines", "over"), [(78, False), (79, True)])
def test_the_walk_counts_a_function_from_its_def_to_its_last_line(tmp_path, body_lines, over):
    package = tmp_path / "pkg"
    package.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(body_lines))
    (package / "m.py").write_text(f"def f():\n    '''doc'''\n{body}")
    _, functions = sizes(package)
    ((key, lines),) = functions.items()
    assert key == "pkg/m.py:f:1" and lines == body_lines + 2
    assert (lines > MAX_FUNCTION_LINES) is over
