"""APIGen / Salesforce xLAM function-calling rows: ``query``, ``tools``, ``answers``.

The format of ``Salesforce/xlam-function-calling-60k`` and the APIGen data like it::

    {"id": 0,
     "query": "Where can I find live giveaways for beta access and games?",
     "tools": [{"name": "live_giveaways_by_type", "description": "...",
                "parameters": {"type": {"description": "...", "type": "str",
                                        "default": "game"}}}],
     "answers": [{"name": "live_giveaways_by_type", "arguments": {"type": "beta"}},
                 {"name": "live_giveaways_by_type", "arguments": {"type": "game"}}]}

``tools`` and ``answers`` may each be a JSON string or the value itself. A row is one
conversation: the user turn is ``query`` and one assistant turn makes every call of
``answers`` (they all answer the one query, so they run in parallel: one gold step);
``answers: []`` is a no-call task. There is no reference answer. ``category`` (or
``domain``), when present, becomes the tasks' domain, else ``xlam``.

A tool's ``parameters`` maps each parameter's name to ``{type, description, default}``
with Python-style type strings (``str``, ``List[int]``, ``Optional[str]``,
``"float, optional"``, ``Dict[str, Any]``, ``Callable``...). :func:`parameters_schema`
turns that into a JSON Schema object (:func:`type_schema` maps one type string); a
``parameters`` that already is an object JSON Schema is kept as it is.
"""

from __future__ import annotations

import re
from typing import Any

from slca.data.importers.conversation import (
    Conversation,
    RawCall,
    RowReject,
    Turn,
    parse_json,
)

NAME = "xlam"

KEYS = ("query", "tools", "answers")

_SIMPLE = {
    "str": "string",
    "string": "string",
    "text": "string",
    "int": "integer",
    "integer": "integer",
    "long": "integer",
    "float": "number",
    "number": "number",
    "double": "number",
    "decimal": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "dict": "object",
    "mapping": "object",
    "none": "null",
    "nonetype": "null",
    "null": "null",
}
"""Type names (lower case) that map to one JSON Schema type. ``object`` is not among
them: in a Python signature it means anything."""

_ARRAYS = {"list", "tuple", "set", "frozenset", "sequence", "iterable", "array", "collection"}

_TYPE_RE = re.compile(r"(?P<name>[A-Za-z_][\w.]*)\s*(?:\[(?P<args>.*)\])?", re.DOTALL)
_OPTIONAL_RE = re.compile(r"^(?P<head>.*?)[\s,(]+optional\)?$", re.IGNORECASE | re.DOTALL)


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets (``Dict[str, int], optional``)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _union(members: list[str]) -> tuple[dict[str, Any], bool]:
    nullable = any(_SIMPLE.get(m.lower()) == "null" for m in members)
    schemas = [type_schema(m)[0] for m in members if _SIMPLE.get(m.lower()) != "null"]
    if not schemas or any(s == {} for s in schemas):
        return {}, nullable
    unique = [s for i, s in enumerate(schemas) if s not in schemas[:i]]
    if len(unique) == 1:
        return unique[0], nullable
    if all(list(s) == ["type"] and isinstance(s["type"], str) for s in unique):
        return {"type": sorted({s["type"] for s in unique})}, nullable
    return {"anyOf": unique}, nullable


def _array(name: str, args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array"}
    if name == "tuple" and len(args) == 2 and args[1] == "...":
        args = args[:1]
    items = [type_schema(a)[0] for a in args if a]
    if items and all(s == items[0] for s in items) and items[0] != {}:
        out["items"] = items[0]
    return out


def type_schema(type_text: Any) -> tuple[dict[str, Any], bool]:
    """A Python-style type string as a JSON Schema, and whether it says optional.

    ``Optional[X]`` and ``"X, optional"`` are X, optional (not required); ``List[X]``
    is an array of X; a type it does not know (``Callable``, ``Any``, ``object``,
    prose) gives ``{}``, which accepts anything: a row is never rejected for its types.
    """
    if isinstance(type_text, list) and all(isinstance(t, str) for t in type_text):
        return _union(type_text) if type_text else ({}, False)
    if not isinstance(type_text, str):
        return {}, False
    text = type_text.strip()
    parts = _split_top(text)
    if len(parts) > 1:  # "str, optional", "int, default=10"
        schema, optional = type_schema(parts[0])
        modifiers = [p.lower() for p in parts[1:]]
        return schema, optional or any(
            "optional" in m or m.startswith("default") for m in modifiers
        )
    m = _OPTIONAL_RE.match(text)
    if m:  # "str optional", "str (optional)"
        return type_schema(m["head"])[0], True
    m = _TYPE_RE.fullmatch(text)
    if not m:
        return {}, False
    name = m["name"].rsplit(".", 1)[-1].lower()  # typing.List -> list
    args = _split_top(m["args"]) if m["args"] is not None else []
    if name == "optional":
        return (type_schema(args[0])[0] if len(args) == 1 else {}), True
    if name == "union":
        return _union(args)
    if name in _ARRAYS:
        return _array(name, args), False
    if name in _SIMPLE:
        return {"type": _SIMPLE[name]}, False
    return {}, False


def _is_object_schema(parameters: dict[str, Any]) -> bool:
    return parameters.get("type") == "object" and isinstance(parameters.get("properties", {}), dict)


def parameters_schema(parameters: dict[str, Any], where: str) -> dict[str, Any]:
    """xLAM's ``{name: {type, description, default}}`` as an object JSON Schema.

    A parameter is required unless its type says optional, it has a ``default``, or it
    says ``"required": false`` / ``"optional": true``; ``description``, ``default`` and
    ``enum`` are kept.
    """
    if _is_object_schema(parameters):
        return parameters
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, spec in parameters.items():
        if isinstance(spec, str):  # a bare type: {"city": "str"}
            spec = {"type": spec}
        if not isinstance(spec, dict):
            raise RowReject(
                "bad_tool", f"{where}.{name}", f"a {type(spec).__name__}, not a parameter spec"
            )
        schema, optional = type_schema(spec.get("type"))
        schema = dict(schema)
        if spec.get("description") is not None:
            schema["description"] = str(spec["description"])
        if "default" in spec:
            schema["default"] = spec["default"]
        if isinstance(spec.get("enum"), list) and spec["enum"]:
            schema["enum"] = spec["enum"]
        optional = (
            optional
            or "default" in spec
            or spec.get("optional") is True
            or spec.get("required") is False
        )
        properties[name] = schema
        if not optional:
            required.append(name)
    return {"type": "object", "properties": properties, "required": required}


def tools_of(raw: Any) -> Any:
    """The row's tools with each ``parameters`` as a JSON Schema; what is not a list of
    tool objects is left for the common checks to reject."""
    raw = parse_json(raw, "tools")
    if not isinstance(raw, list):
        return raw
    tools = []
    for i, tool in enumerate(raw):
        spot = f"tools[{i}]"
        tool = parse_json(tool, spot)
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            tool, spot = tool["function"], f"{spot}.function"
        if isinstance(tool, dict):
            parameters = parse_json(tool.get("parameters"), f"{spot}.parameters")
            if isinstance(parameters, dict) and parameters:
                parameters = parameters_schema(parameters, f"{spot}.parameters")
            tool = {**tool, "parameters": parameters}
        tools.append(tool)
    return tools


def sniff(row: Any) -> bool:
    return (
        isinstance(row, dict)
        and all(k in row for k in KEYS)
        and isinstance(row["query"], str)
        and "messages" not in row
        and "conversations" not in row
    )


def conversation(row: Any) -> Conversation:
    if not isinstance(row, dict) or not all(k in row for k in KEYS):
        raise RowReject("unknown_format", "<row>", "an xlam row needs query, tools and answers")
    query = row["query"]
    if not isinstance(query, str):
        raise RowReject("bad_message", "query", f"a {type(query).__name__}, not text")
    if not query.strip():
        raise RowReject("no_user_turn", "query", "the query is empty")
    answers = parse_json(row["answers"], "answers")
    if answers is None:
        answers = []
    if not isinstance(answers, list):
        kind = type(answers).__name__
        raise RowReject("bad_message", "answers", f"a {kind}, not a list of calls")
    calls = []
    for j, answer in enumerate(answers):
        spot = f"answers[{j}]"
        answer = parse_json(answer, spot)
        if not isinstance(answer, dict):
            raise RowReject("bad_message", spot, "a call is not an object")
        calls.append(RawCall(answer.get("name"), answer.get("arguments"), spot))
    turns = [
        Turn("user", query, where="query"),
        Turn("assistant", "", calls, where="answers", implied=True),
    ]
    domain = row.get("category") or row.get("domain") or NAME
    return Conversation(tools_of(row["tools"]), turns, str(domain))
