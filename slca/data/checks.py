"""Semantic checks of a task record that a pydantic model cannot express.

Shared by ``prepare`` (which rejects or quarantines a bad record) and by the Great
Expectations suite (which re-checks what was stored). Each check returns a list of
problems as ``(field, message)``; an empty list means the record passes.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from slca.config.data import DataLimits
from slca.data import limits as _limits
from slca.data.record import REFERENCE_RE

Problem = tuple[str, str]


def is_reference(value: Any) -> bool:
    """True for a whole-value reference to an earlier result, e.g. ``$var1.skyId$``."""
    return isinstance(value, str) and REFERENCE_RE.match(value) is not None


@lru_cache(maxsize=4096)
def _validator(schema_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_json))


def validator_for(schema: dict[str, Any]) -> Draft202012Validator:
    """A compiled validator, cached by the schema's canonical JSON."""
    return _validator(json.dumps(schema, sort_keys=True))


# The structure of a schema (every keyword's type and shape) against the same 2020-12
# meta-schema ``jsonschema`` checks, in Rust: ~0.03 ms a schema where ``check_schema``
# takes ~5 ms (its $dynamicRef resolution), 2,914 distinct schemas in the demo's data.
# Formats are left to Python: of those the meta-schema names (regex, uri, uri-reference),
# ``jsonschema`` checks "regex" (re.compile), and uri ones only with rfc3987 installed.
_STRUCTURE = jsonschema_rs.Draft202012Validator(
    Draft202012Validator.META_SCHEMA, validate_formats=False
)
_FAST_META_CHECK = not {"uri", "uri-reference"} & set(Draft202012Validator.FORMAT_CHECKER.checkers)


def _regex_candidates(node: Any) -> Iterator[str]:
    """Every string that could sit where the meta-schema asks for format "regex": each
    string under a "pattern" key and each key of a "patternProperties" object, wherever
    they are (a superset: a "pattern" inside a default or enum value is included too)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key == "patternProperties" and isinstance(value, dict):
                yield from value
            yield from _regex_candidates(value)
    elif isinstance(node, list):
        for item in node:
            yield from _regex_candidates(item)


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def _surely_valid(schema: Any) -> bool:
    """True only where ``check_schema`` would pass: the Rust check finds the structure
    valid and every regex candidate compiles with Python's ``re`` (what ``jsonschema``'s
    "regex" format runs). False means "ask ``jsonschema``", never "invalid"."""
    try:
        if not _FAST_META_CHECK or not _STRUCTURE.is_valid(schema):
            return False
        return all(_compiles(p) for p in _regex_candidates(schema))
    except (RecursionError, ValueError):  # jsonschema decides, and says why
        return False


@lru_cache(maxsize=4096)
def _schema_error(schema_json: str) -> str | None:
    """``jsonschema``'s verdict on one schema, as a message (None: valid). Its slow
    meta-check runs only where the fast one cannot vouch for the schema, so the verdict
    and the message are always ``jsonschema``'s."""
    try:
        schema = json.loads(schema_json)
        if _surely_valid(schema):
            return None
        Draft202012Validator.check_schema(schema)
    except SchemaError as e:
        path = "/".join(str(p) for p in e.path)
        return f"invalid JSON Schema at '{path}': {e.message}"
    except RecursionError:  # the depth limit keeps schemas far from this; never a crash
        return "nests too deep to check"
    return None


@lru_cache(maxsize=4096)
def _too_deep(schema_json: str, limit: int) -> bool:
    """The depth walk of one schema, once per distinct schema and limit."""
    try:
        return _limits.schema_depth_over(json.loads(schema_json), limit)
    except RecursionError:
        return True


def _canonical(schema: dict[str, Any] | bool) -> str | None:
    """The cache key of a schema; None when it nests too deep even to serialise."""
    try:
        return json.dumps(schema, sort_keys=True)
    except RecursionError:
        return None


def _schemas_within(
    tools: list[dict[str, Any]], limits: DataLimits
) -> tuple[list[Problem], list[tuple[str, Any, str | None]]]:
    """The tools' size problems, and every schema within the limits as (field, tool
    name, canonical JSON; None when it is not a schema at all). The JSON is made once
    per schema: it is the cache key of both the depth walk and the meta-check."""
    over: list[Problem] = []
    schemas: list[tuple[str, Any, str | None]] = []
    for i, tool in enumerate(tools):
        big = _limits.description_problem(i, tool, limits)
        if big is not None:
            over.append(big)
        for key in ("parameters", "response"):
            schema = tool.get(key)
            if schema is None and key == "response":
                continue
            field, name = f"tools[{i}].{key}", tool.get("name")
            if not isinstance(schema, dict | bool):
                schemas.append((field, name, None))
                continue
            text = _canonical(schema)
            if text is None or _too_deep(text, limits.max_schema_depth):
                over.append((field, _limits.too_deep(name, limits)))
            else:
                schemas.append((field, name, text))
    return over, schemas


def limit_problems(tools: list[dict[str, Any]], limits: DataLimits | None = None) -> list[Problem]:
    """Each tool over the size ``limits`` (the defaults unless given): a description
    over ``max_description_bytes``, a ``parameters`` or ``response`` schema nested past
    ``max_schema_depth`` (walked once per distinct schema)."""
    return _schemas_within(tools, limits or DataLimits())[0]


def schema_problems(tools: list[dict[str, Any]], limits: DataLimits | None = None) -> list[Problem]:
    """The tools' :func:`limit_problems` when there are any (a schema nested past the
    limit is never handed to the recursive meta-check); otherwise each tool's
    ``parameters`` and ``response`` that is not a valid JSON Schema.

    Checked once per distinct schema (tools repeat across records).
    """
    over, schemas = _schemas_within(tools, limits or DataLimits())
    if over:
        return over
    out: list[Problem] = []
    for field, name, text in schemas:
        err = "not a JSON Schema" if text is None else _schema_error(text)
        if err:
            out.append((field, f"{name!r}: {err}"))
    return out


def _mask_references(schema: dict[str, Any], args: dict[str, Any]) -> tuple[dict, dict]:
    """Drop reference-valued arguments from the instance, keeping them 'present'.

    A reference's value is only known after the earlier call ran, so its type cannot be
    checked here; it still satisfies ``required``.
    """
    refs = {k for k, v in args.items() if is_reference(v)}
    if not refs:
        return schema, args
    schema = copy.deepcopy(schema)
    if isinstance(schema.get("required"), list):
        schema["required"] = [k for k in schema["required"] if k not in refs]
    return schema, {k: v for k, v in args.items() if k not in refs}


def gold_problems(tools: list[dict[str, Any]], gold: list[list[dict[str, Any]]]) -> list[Problem]:
    """Every gold call names a tool of the task and its arguments match its parameters.

    References (``$label.path$``) must name a label of an earlier step.
    """
    by_name = {t.get("name"): t for t in tools}
    out: list[Problem] = []
    labels: set[str] = set()
    for i, step in enumerate(gold):
        step_labels: set[str] = set()
        for j, call in enumerate(step):
            where = f"gold[{i}][{j}]"
            tool = by_name.get(call.get("name"))
            if tool is None:
                out.append((f"{where}.name", f"{call.get('name')!r} is not a tool of the task"))
                continue
            if call.get("arguments_known") is False:
                continue  # the source names the tool only: no arguments to check
            args = call.get("arguments") or {}
            for k, v in args.items():
                if is_reference(v):
                    label = REFERENCE_RE.match(v).group("label")
                    if label not in labels:
                        out.append(
                            (
                                f"{where}.arguments.{k}",
                                f"reference {v!r} names no result of an earlier step",
                            )
                        )
            schema, inst = _mask_references(tool.get("parameters") or {}, args)
            try:
                errors = sorted(validator_for(schema).iter_errors(inst), key=lambda e: e.path)
            except SchemaError as e:  # reported by schema_problems
                out.append((f"{where}.arguments", f"cannot check: {e.message}"))
                continue
            for e in errors[:3]:
                path = ".".join(str(p) for p in e.path)
                field = f"{where}.arguments" + (f".{path}" if path else "")
                out.append((field, f"{call['name']}: {e.message}"))
            if call.get("label"):
                step_labels.add(call["label"])
        labels |= step_labels
    return out


def record_problems(record: dict[str, Any], limits: DataLimits | None = None) -> list[Problem]:
    """All semantic problems of one record given as plain JSON data. Tools over the
    size ``limits`` (default: the defaults) are the only problems reported: nothing is
    checked against a schema nested past them."""
    tools = record.get("tools") or []
    over = limit_problems(tools, limits)
    if over:
        return over
    return schema_problems(tools, limits) + gold_problems(tools, record.get("gold") or [])
