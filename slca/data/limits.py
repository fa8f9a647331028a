"""How large a task may be (``prepare.limits``): checks that are themselves bounded.

A tool schema nested thousands of levels deep makes every recursive JSON walk (the
``json`` parser, the JSON Schema meta-check, the simulator's generator) exceed Python's
stack, and a megabyte description multiplies training's memory. ``prepare`` and the
importers reject such a task; every reader of stored task data (:func:`slca.data.io.
read_records`, validation) refuses it, naming the file, the task and the field. Each
check returns a problem ``(field, message)`` or None, like :mod:`slca.data.checks`.

The depth walk is iterative and stops one level past the limit, so a 10,000-level
schema costs as much as a 33-level one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slca.config.data import SCHEMA_DEPTH_CEILING, DataLimits

Problem = tuple[str, str]

CEILING = DataLimits(
    max_schema_depth=SCHEMA_DEPTH_CEILING, max_description_bytes=2**62, max_task_bytes=2**62
)
"""The loosest limits any setting can give: all a check that must not crash needs (the
Great Expectations suite, whose rows :func:`slca.data.io.check_rows` held to the
dataset's own limits first)."""

SETTING = "prepare.limits"
"""Where the limits are set; every message names the setting to raise."""

MAP_KEYWORDS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
"""Keywords whose value maps names to schemas: the map is no level of its own, each
schema in it is one level below the schema holding the keyword."""

_SCHEMA, _MAP, _ARRAY = 0, 1, 2


def schema_depth_over(schema: Any, limit: int) -> bool:
    """True when ``schema`` nests deeper than ``limit`` levels.

    The root is level 1; a schema (or any object) inside it is one level deeper,
    reached through a keyword (``items``, ``not``), a name map (``properties``) or an
    array (``anyOf``); nested arrays count a level each. Objects and arrays that are
    data (``enum``, ``default``) count the same way, so no JSON inside a schema nests
    more than about twice the limit. Iterative (an explicit stack), and it returns at
    the first node past the limit.
    """
    stack: list[tuple[Any, int, int]] = [(schema, 1, _SCHEMA)]
    pop, push = stack.pop, stack.append
    while stack:
        node, level, kind = pop()
        if level > limit:
            return True
        if kind == _ARRAY:  # each object or array in an array is one level down
            for value in node:
                if isinstance(value, dict):
                    push((value, level + 1, _SCHEMA))
                elif isinstance(value, list):
                    push((value, level + 1, _ARRAY))
            continue
        in_schema = kind == _SCHEMA
        for key, value in node.items():
            if isinstance(value, dict):
                # a name map is free: the schemas in it are one level down
                if in_schema and key in MAP_KEYWORDS:
                    push((value, level, _MAP))
                else:
                    push((value, level + 1, _SCHEMA))
            elif isinstance(value, list):  # free (anyOf, required): its items count
                push((value, level, _ARRAY))
    return False


def utf8_size(text: str | None) -> int:
    """Bytes of ``text`` in UTF-8 (0 for None)."""
    return 0 if text is None else len(text.encode("utf-8", "surrogatepass"))


def description_problem(index: int, tool: Mapping[str, Any], limits: DataLimits) -> Problem | None:
    """Tool ``index``'s description over ``max_description_bytes``, or None."""
    description = tool.get("description")
    size = utf8_size(description) if isinstance(description, str) else 0
    if size <= limits.max_description_bytes:
        return None
    return (
        f"tools[{index}].description",
        f"{tool.get('name')!r}: {size:,} bytes, over {SETTING}.max_description_bytes "
        f"({limits.max_description_bytes:,})",
    )


def tool_problems(tools: Any, limits: DataLimits) -> Problem | None:
    """The first of ``tools`` (task tool specs) whose description is over
    ``max_description_bytes`` or whose ``parameters``/``response`` schema nests deeper
    than ``max_schema_depth``; None when every tool is within the limits (or ``tools``
    is not a list of objects, which the record's own checks report)."""
    if not isinstance(tools, list):
        return None
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            continue
        problem = description_problem(i, tool, limits)
        if problem is not None:
            return problem
        for key in ("parameters", "response"):
            schema = tool.get(key)
            if isinstance(schema, dict) and schema_depth_over(schema, limits.max_schema_depth):
                return (f"tools[{i}].{key}", too_deep(tool.get("name"), limits))
    return None


def too_deep(name: Any, limits: DataLimits) -> str:
    """The message for a schema nested past the limit."""
    return (
        f"{name!r}: the schema nests deeper than {SETTING}.max_schema_depth "
        f"({limits.max_schema_depth} levels)"
    )


def too_deep_to_parse(column: str, limits: DataLimits) -> str:
    """The message for a stored JSON column nested too deep for the parser itself."""
    if column == "tools":
        return (
            f"a schema nests deeper than {SETTING}.max_schema_depth "
            f"({limits.max_schema_depth} levels): too deep even to parse"
        )
    return "the JSON nests too deep to parse"


def task_size_problem(size: int, limits: DataLimits) -> Problem | None:
    """A task of ``size`` bytes (its stored JSON) over ``max_task_bytes``, or None."""
    if size <= limits.max_task_bytes:
        return None
    return (
        "<task>",
        f"{size:,} bytes of JSON, over {SETTING}.max_task_bytes ({limits.max_task_bytes:,})",
    )
