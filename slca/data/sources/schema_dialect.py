"""Source type dialects to JSON Schema.

BFCL writes Python-ish types (``dict``, ``float``, ``tuple``, ``any``); NESTFUL specs
use JSON types, sometimes none (SGD) or prose (``"Date (yyyy-mm-dd)"``). Both convert
recursively through ``properties``, ``items`` and ``additionalProperties``.
"""

from __future__ import annotations

from typing import Any

from slca.data.sources import FieldError

TYPE_MAP = {
    "string": "string",
    "str": "string",
    "String": "string",
    "integer": "integer",
    "int": "integer",
    "number": "number",
    "float": "number",
    "double": "number",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "object": "object",
    "dict": "object",
    "null": "null",
}

_KEEP = (
    "description",
    "enum",
    "default",
    "format",
    "minimum",
    "maximum",
    "pattern",
    "minItems",
    "maxItems",
    "title",
    "const",
)


def convert_type(t: Any, field: str) -> dict[str, Any]:
    if t is None or t == "any":
        return {}
    if isinstance(t, list) and t and all(isinstance(x, str) and x in TYPE_MAP for x in t):
        return {"type": sorted({TYPE_MAP[x] for x in t})}
    if isinstance(t, str):
        if t in TYPE_MAP:
            return {"type": TYPE_MAP[t]}
        # prose types seen in NESTFUL: "Date (yyyy-mm-dd)"; "file" (a path or URL)
        if t.lower().startswith("date") or t == "file":
            return {"type": "string"}
    raise FieldError(field, f"unsupported type {t!r}")


def to_json_schema(node: Any, field: str) -> dict[str, Any]:
    """One property/parameter node in a source dialect to JSON Schema.

    A bare type name (``{"count": "string"}``, seen in NESTFUL) stands for that type.
    """
    if isinstance(node, str):
        return convert_type(node, field)
    if not isinstance(node, dict):
        raise FieldError(field, f"expected an object, got {type(node).__name__}")
    out = convert_type(node.get("type"), f"{field}.type")
    for k in _KEEP:
        if k in node and node[k] not in (None, [], ""):
            out[k] = node[k]
    if isinstance(node.get("properties"), dict) and node["properties"]:
        out["properties"] = {
            k: to_json_schema(v, f"{field}.properties.{k}") for k, v in node["properties"].items()
        }
        if out.get("type") is None:
            out["type"] = "object"
    req = node.get("required")
    if isinstance(req, list) and req:
        out["required"] = list(req)
    if isinstance(node.get("items"), dict):
        out["items"] = to_json_schema(node["items"], f"{field}.items")
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(
            node["additionalProperties"], f"{field}.additionalProperties"
        )
    return out
