"""Constrained decoding for the ``llm`` simulator backend: response schemas tightened
into what a small model can fill (bounded, closed objects) and compiled to an
llguidance grammar, with approximations when a schema does not compile as it is."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

ANY_OBJECT: dict[str, Any] = {"type": "object"}
"""What the model is constrained to when a tool has no response schema."""

# llguidance JSON options: compact, json.dumps-style separators and no free
# whitespace (a small model otherwise pads with newlines until it runs out of tokens).
_JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# Approximations tried, in order, when a schema does not compile as it is.
_APPROXIMATIONS = ({}, {"coerce_one_of": True, "lenient": True})


class LLMBackendError(RuntimeError):
    """A proposal could not be made (schema not compilable, output truncated, …)."""


# ---------------------------------------------------------------------- schema


@dataclass(frozen=True)
class Tightening:
    """Bounds added to a response schema for decoding, where it sets none.

    A small model sampling under a grammar can run away inside an unbounded value
    (``1.000000…``, ever more keys or items) until it hits ``max_new_tokens``.
    """

    max_decimals: int = 4
    """Numbers get ``multipleOf: 10**-max_decimals``: at most this many decimals."""
    max_abs: int = 10**12
    """Numbers and integers without a bound get ``±max_abs``."""
    max_string_length: int = 256
    """Strings without ``maxLength`` (and without ``pattern``/``format``) get this."""
    max_items: int = 16
    """Arrays without ``maxItems`` get this (or their ``minItems``, if larger)."""


def tighten_schema(
    schema: Any, limits: Tightening | None = None, *, close_objects: bool = True
) -> Any:
    """A copy of ``schema`` narrowed for decoding: objects closed, scalars bounded.

    Object schemas with ``properties`` and no ``additionalProperties`` forbid extra
    keys (JSON Schema allows them by default, and a small model then invents keys
    until it runs out of tokens); numbers, strings and arrays get the bounds of
    ``limits`` where they have none. Every change only narrows the set of valid
    instances, so what the tightened schema admits validates against the original,
    with two exceptions: nothing under ``not``/``if``/``then``/``else`` is touched
    (not monotone), and a ``oneOf`` whose branches overlap only through their
    extra keys can admit an instance the original's open branches both match (the
    simulator's validation rejects it). Narrowing can also make a schema
    unsatisfiable (hence ``allOf`` branches are never closed); the caller then
    falls back to the original schema.
    """
    return _tighten(copy.deepcopy(schema), limits or Tightening(), close_objects, closable=True)


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ITEMS = ("items", "additionalItems", "contains", "propertyNames", "additionalProperties")
_OPEN_MARKERS = ("additionalProperties", "patternProperties", "unevaluatedProperties", "$ref")
_COMBINATORS = ("allOf", "anyOf", "oneOf")


def _tighten(schema: Any, limits: Tightening, close: bool, *, closable: bool) -> Any:
    if not isinstance(schema, dict):
        return schema
    has_props = isinstance(schema.get("properties"), dict)
    combined = any(k in schema for k in (*_COMBINATORS, "if", "then", "else", "not"))
    if (
        close
        and closable
        and has_props
        and not combined
        and not any(k in schema for k in _OPEN_MARKERS)
    ):
        schema["additionalProperties"] = False
    _bound_scalars(schema, limits)
    for key in _SCHEMA_MAPS:
        sub = schema.get(key)
        if isinstance(sub, dict):
            for name in sub:
                sub[name] = _tighten(sub[name], limits, close, closable=True)
    for key in _SCHEMA_ITEMS:
        if isinstance(schema.get(key), dict):
            schema[key] = _tighten(schema[key], limits, close, closable=True)
    for key in ("items", "prefixItems"):  # tuple forms
        if isinstance(schema.get(key), list):
            schema[key] = [_tighten(s, limits, close, closable=True) for s in schema[key]]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            # A branch sees the whole instance: closing it is safe only when the
            # parent declares no properties of its own.
            schema[key] = [_tighten(s, limits, close, closable=not has_props) for s in schema[key]]
    if isinstance(schema.get("allOf"), list):
        schema["allOf"] = [_tighten(s, limits, close, closable=False) for s in schema["allOf"]]
    return schema


def _bound_scalars(schema: dict[str, Any], limits: Tightening) -> None:
    if "enum" in schema or "const" in schema:
        return
    declared = schema.get("type")
    types = set(declared) if isinstance(declared, list) else {declared}
    if types & {"number", "integer"}:
        if "number" in types and "multipleOf" not in schema:
            schema["multipleOf"] = 10.0**-limits.max_decimals
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        high = schema.get("maximum", schema.get("exclusiveMaximum"))
        if low is None and (high is None or _num(high) > -limits.max_abs):
            schema["minimum"] = -limits.max_abs
        if high is None and (low is None or _num(low) < limits.max_abs):
            schema["maximum"] = limits.max_abs
    if "string" in types and not any(k in schema for k in ("maxLength", "pattern", "format")):
        schema["maxLength"] = max(limits.max_string_length, _int(schema.get("minLength")))
    if "array" in types and "maxItems" not in schema:
        schema["maxItems"] = max(limits.max_items, _int(schema.get("minItems")))


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class DecodingSchema:
    """The schema decoding is constrained to, with the llguidance options in
    ``x-guidance``; ``approximations`` says what it gives up against the original."""

    schema: dict[str, Any]
    grammar: str
    approximations: tuple[str, ...] = ()


def compile_decoding_schema(
    response_schema: Any, tokenizer: Any = None, limits: Tightening | None = None
) -> DecodingSchema:
    """Compile a response schema (None: any object) for constrained decoding.

    Tries the tightened schema (:func:`tighten_schema`), the same with objects
    left open, then the original; then each again with llguidance's
    approximations (``oneOf`` as ``anyOf``, unimplemented keywords ignored). The
    simulator's validation catches what an approximation lets through. Raises
    :class:`LLMBackendError` naming the problem when nothing compiles.
    ``tokenizer`` (an ``llguidance.LLTokenizer``) is needed to detect problems that
    only show when the grammar is instantiated (e.g. unsatisfiable schemas).
    """
    import llguidance

    if response_schema is None:
        response_schema = ANY_OBJECT
    if isinstance(response_schema, bool) or not isinstance(response_schema, dict):
        raise LLMBackendError(
            f"response schema must be a JSON object or null, got {type(response_schema).__name__}"
        )
    candidates = [
        (tighten_schema(response_schema, limits), None),
        (
            tighten_schema(response_schema, limits, close_objects=False),
            "objects left open (closing them made the schema unsatisfiable)",
        ),
        (response_schema, "not tightened (tightening made the schema unsatisfiable)"),
    ]
    first_error = None
    for options in _APPROXIMATIONS:
        for candidate, fallback in candidates:
            schema = dict(candidate)
            schema["x-guidance"] = {**_JSON_LAYOUT, **options}
            try:
                grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
                problem = _grammar_problem(llguidance, grammar, tokenizer)
            except (ValueError, TypeError) as exc:
                problem = str(exc)
            if problem is None:
                notes = []
                if options:
                    notes.append(f"approximated with llguidance options {sorted(options)}")
                if fallback:
                    notes.append(fallback)
                return DecodingSchema(schema, grammar, tuple(notes))
            first_error = first_error or problem
    raise LLMBackendError(
        f"response schema cannot be compiled for constrained decoding: {first_error}"
    )


def _grammar_problem(llguidance: Any, grammar: str, tokenizer: Any) -> str | None:
    if tokenizer is None:
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
        return messages[0] if is_error else None
    matcher = llguidance.LLMatcher(tokenizer, grammar)
    return matcher.get_error() if matcher.is_error() else None
