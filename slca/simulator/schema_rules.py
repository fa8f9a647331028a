"""What the schema backend's generator knows about JSON Schema: the keywords it cannot
satisfy by construction, numeric bounds, ``allOf`` merging, plausibility of example
values, and generators for string formats."""

from __future__ import annotations

import datetime as dt
import math
import random
import uuid
from collections.abc import Mapping
from typing import Any

WORDS = (
    "alpha",
    "bravo",
    "delta",
    "harbor",
    "maple",
    "orbit",
    "quartz",
    "river",
    "summit",
    "tango",
    "violet",
    "willow",
)
UNSUPPORTED = (
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependentRequired",
    "contains",
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
)


class SchemaGenerationError(ValueError):
    """The schema cannot be satisfied by construction (contradictory or unsupported)."""


class Fields(dict):
    """Arguments as template fields: scalars as text; objects fail (no attribute access)."""

    def __getitem__(self, key: str) -> str:
        value = super().__getitem__(key)
        if isinstance(value, dict | list):
            raise KeyError(key)
        return str(value)


def bounds(schema: Mapping[str, Any], path: str, *, integer: bool) -> tuple[float, float]:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    nudge = 1 if integer else 0.01
    if isinstance(ex_lo, bool):  # draft 4: a flag on minimum
        ex_lo = lo if ex_lo else None
    if isinstance(ex_hi, bool):
        ex_hi = hi if ex_hi else None
    if ex_lo is not None:
        lo = max(lo if lo is not None else -math.inf, ex_lo + nudge)
    if ex_hi is not None:
        hi = min(hi if hi is not None else math.inf, ex_hi - nudge)
    if lo is None and hi is None:
        lo, hi = 0, 1000
    elif lo is None:
        lo = hi - 1000
    elif hi is None:
        hi = lo + 1000
    if integer:
        lo, hi = math.ceil(lo), math.floor(hi)
    if lo > hi:
        raise SchemaGenerationError(f"{path}: empty numeric range [{lo}, {hi}]")
    return lo, hi


def merge(schemas: list[Any], path: str) -> dict[str, Any]:
    """Conjunction of object schemas, for ``allOf`` and sibling keywords next to ``$ref``."""
    out: dict[str, Any] = {}
    for schema in schemas:
        if schema is True:
            continue
        if not isinstance(schema, Mapping):
            raise SchemaGenerationError(f"{path}: allOf member is not a schema")
        for key, value in schema.items():
            if key not in out:
                out[key] = value
            elif key == "properties":
                merged = dict(out[key])
                for name, sub in value.items():
                    merged[name] = merge([merged[name], sub], path) if name in merged else sub
                out[key] = merged
            elif key == "required":
                out[key] = list(dict.fromkeys([*out[key], *value]))
            elif key in ("minimum", "minLength", "minItems", "exclusiveMinimum"):
                out[key] = max(out[key], value)
            elif key in ("maximum", "maxLength", "maxItems", "exclusiveMaximum"):
                out[key] = min(out[key], value)
            elif key == "enum":
                out[key] = [v for v in out[key] if v in value]
            elif key == "type":
                a = set(out[key] if isinstance(out[key], list) else [out[key]])
                b = set(value if isinstance(value, list) else [value])
                if "number" in a and "integer" in b or "number" in b and "integer" in a:
                    a, b = a | {"integer"}, b | {"integer"}
                common = sorted(a & b)
                if not common:
                    raise SchemaGenerationError(
                        f"{path}: allOf types {sorted(a)} and {sorted(b)} have nothing in common"
                    )
                out[key] = common if len(common) > 1 else common[0]
            else:
                out[key] = value
    return out


def plausible(value: Any, schema: Any) -> bool:
    """A cheap pre-check that an echoed value fits a field (the simulator validates fully)."""
    if not isinstance(schema, Mapping):
        return schema is True
    if "const" in schema:
        return value == schema["const"]
    if "enum" in schema:
        return value in schema["enum"]
    declared = schema.get("type")
    if declared is None:
        return not any(k in schema for k in ("$ref", "allOf", "oneOf", "anyOf"))
    kinds = declared if isinstance(declared, list) else [declared]
    return any(is_type(value, kind) for kind in kinds)


def is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(
        value,
        {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}.get(
            kind, object
        ),
    )


def random_date(rng: random.Random) -> dt.date:
    return dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 730))


FORMATS = {
    "date": lambda rng: random_date(rng).isoformat(),
    "date-time": lambda rng: (
        f"{random_date(rng).isoformat()}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"
    ),
    "time": lambda rng: f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
    "email": lambda rng: f"{rng.choice(WORDS)}.{rng.randint(1, 99)}@example.com",
    "uri": lambda rng: f"https://example.com/{rng.choice(WORDS)}/{rng.randint(1, 999)}",
    "url": lambda rng: f"https://example.com/{rng.choice(WORDS)}/{rng.randint(1, 999)}",
    "uuid": lambda rng: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
    "ipv4": lambda rng: ".".join(str(rng.randint(1, 254)) for _ in range(4)),
    "hostname": lambda rng: f"{rng.choice(WORDS)}.example.com",
}


def unsupported_keywords(schema: Any) -> list[str]:
    """Keywords anywhere in ``schema`` that the generator does not construct for."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            found.update(k for k in UNSUPPORTED if k in node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return sorted(found)
