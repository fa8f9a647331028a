"""The two JSON helpers every layer shares: one canonical serialisation, one path walk."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

MISSING: Any = object()
"""What :func:`walk` returns when the path does not exist (None is a JSON value)."""


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 kept, NaN refused: the form hashed, cached and stored."""
    return json.dumps(
        value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )


def walk(node: Any, parts: Iterable[str]) -> Any:
    """Follow object keys and array indices from ``node``; :data:`MISSING` if any is absent."""
    for part in parts:
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node
