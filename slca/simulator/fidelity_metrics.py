"""Fidelity metrics: how a simulated response agrees with the real one (error, JSON
type, keys, leaf values), one pair at a time."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from slca.simulator.core import is_error

NUMBER_TOLERANCE = 1e-6


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value (ints and floats are both ``number``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def is_failure(response: Any) -> bool:
    """An error response: the simulator's error object, or a real tool's ``{"error": …}``.

    BFCL's backends report domain errors as an object with an ``error`` key (a
    message); the real-tool runners here wrap raised exceptions the same way.
    """
    if is_error(response):
        return True
    return isinstance(response, Mapping) and isinstance(response.get("error"), str | Mapping)


def loosely_equal(a: Any, b: Any) -> bool:
    """Leaf equality: strings trimmed and case-folded, numbers within tolerance, no cross-type."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= NUMBER_TOLERANCE * max(1.0, abs(a), abs(b))
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().casefold() == b.strip().casefold()
    if json_type(a) != json_type(b):
        return False
    return a == b  # null, or two empty containers


def error_agreement(real: Any, sim: Any) -> float:
    """1.0 when both responses are errors or both succeed, else 0.0."""
    return float(is_failure(real) == is_failure(sim))


def _item_keys(value: Any) -> dict[str, frozenset[str]] | None:
    """Key → JSON types it takes: an object's keys, or the union over a list's object items.

    None when the value has no keys (a scalar, or a list without object items).
    """
    if isinstance(value, Mapping):
        return {str(k): frozenset({json_type(v)}) for k, v in value.items()}
    if isinstance(value, list | tuple):
        found: dict[str, set[str]] = {}
        for item in value:
            if isinstance(item, Mapping):
                for k, v in item.items():
                    found.setdefault(str(k), set()).add(json_type(v))
        if any(isinstance(item, Mapping) for item in value):
            return {k: frozenset(v) for k, v in found.items()}
    return None


def type_agreement(real: Any, sim: Any) -> float | None:
    """Share of agreeing type checks; None unless both responses succeed."""
    if is_failure(real) or is_failure(sim):
        return None
    checks = [json_type(real) == json_type(sim)]
    if isinstance(real, list | tuple) and isinstance(sim, list | tuple) and real and sim:
        checks.append({json_type(v) for v in real} == {json_type(v) for v in sim})
    kr, ks = _item_keys(real), _item_keys(sim)
    if kr is not None and ks is not None:
        checks.extend(kr[k] == ks[k] for k in sorted(kr.keys() & ks.keys()))
    return sum(checks) / len(checks)


def key_overlap(real: Any, sim: Any) -> float | None:
    """Jaccard of (item) keys; None unless both succeed and at least one side has keys."""
    if is_failure(real) or is_failure(sim):
        return None
    kr, ks = _item_keys(real), _item_keys(sim)
    if kr is None and ks is None:
        return None
    if kr is None or ks is None:  # keys on one side only: ``null`` vs ``{}`` do not overlap
        return 0.0
    union = kr.keys() | ks.keys()
    return len(kr.keys() & ks.keys()) / len(union) if union else 1.0


def leaves(value: Any, path: str = "$") -> dict[str, Any]:
    """Leaf path → value; empty containers are leaves, a top-level scalar is ``$``."""
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(leaves(v, f"{path}.{k}"))
        return out
    if isinstance(value, list | tuple) and value:
        out = {}
        for i, v in enumerate(value):
            out.update(leaves(v, f"{path}[{i}]"))
        return out
    return {path: value}


def value_counts(real: Any, sim: Any) -> tuple[int, int] | None:
    """(loosely equal shared leaves, shared leaves); None unless both succeed."""
    if is_failure(real) or is_failure(sim):
        return None
    lr, ls = leaves(real), leaves(sim)
    shared = lr.keys() & ls.keys()
    return sum(loosely_equal(lr[p], ls[p]) for p in shared), len(shared)


def value_agreement(real: Any, sim: Any) -> float | None:
    """Share of shared leaves with loosely equal values; None when none is shared."""
    counts = value_counts(real, sim)
    if counts is None or counts[1] == 0:
        return None
    return counts[0] / counts[1]
