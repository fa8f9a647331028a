"""BFCL v4 (``bfcl-eval``, Apache-2.0): out-of-domain eval sets. Eval-only.

Data: ``bfcl_eval/data/BFCL_v4_<category>.json`` (JSON Lines despite the suffix) with
ground truth in ``bfcl_eval/data/possible_answer/BFCL_v4_<category>.json`` (also JSONL):
per call ``{name: {argument: [accepted values]}}``; ``""`` among them = may be omitted.
The package is located, never imported (its ``__init__`` needs no deps, but its
harness does).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slca.data.checks import validator_for
from slca.data.record import Call, Message, TaskRecord, ToolSpec
from slca.data.sources import FieldError, SourceItem, package_dir, require
from slca.data.sources.schema_dialect import to_json_schema

SOURCE = "bfcl"
NO_ANSWER = frozenset({"irrelevance", "live_irrelevance"})


def data_dir() -> Path:
    return package_dir("bfcl_eval", "bfcl-eval") / "data"


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, decoded JSON) per non-blank line; a bad line gives a FieldError."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                yield n, FieldError("line", f"invalid JSON: {e.msg} at column {e.colno}")


def tool_spec(fn: Any, i: int) -> ToolSpec:
    """BFCL's function doc ``fn`` (``function[i]``) as a tool spec (JSON Schema parameters)."""
    f = f"function[{i}]"
    name = require(fn, "name", str, f"{f}.name")
    params = require(fn, "parameters", dict, f"{f}.parameters")
    schema = to_json_schema(params, f"{f}.parameters")
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return ToolSpec(name=name, description=fn.get("description") or "", parameters=schema)


def _messages(question: Any) -> list[Message]:
    if not isinstance(question, list):
        raise FieldError("question", "expected a list of turns")
    out = []
    for t, turn in enumerate(question):
        turn = turn if isinstance(turn, list) else [turn]
        for m, msg in enumerate(turn):
            role = require(msg, "role", str, f"question[{t}][{m}].role")
            if role not in ("system", "user"):
                raise FieldError(f"question[{t}][{m}].role", f"unexpected role {role!r}")
            content = require(msg, "content", str, f"question[{t}][{m}].content")
            out.append(Message(role=role, content=content))
    return out


_OMIT = object()


def _first(values: list[Any]) -> Any:
    """The first accepted value that is not the may-be-omitted marker ``""``."""
    for v in values:
        if v != "":
            return _resolve(v)
    return _OMIT


def _resolve(value: Any) -> Any:
    """BFCL nests accepted-value lists inside dict arguments: pick the first at each level."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            chosen = _first(v) if isinstance(v, list) else _resolve(v)
            if chosen is not _OMIT:
                out[k] = chosen
        return out
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    return value


def _choose(values: list[Any], schema: dict[str, Any] | None) -> Any:
    """First accepted value valid under the parameter's schema; else omit if allowed.

    BFCL's checker is lenient about types ('N/A', None, 'dontcare' next to typed values);
    the canonical gold value is one the API accepts. Falls back to the first candidate,
    which the record checks then report.
    """
    candidates = [_resolve(v) for v in values if v != ""]
    if schema is not None:
        v = validator_for(schema)
        for c in candidates:
            if v.is_valid(c):
                return c
        if "" in values:
            return _OMIT
    return candidates[0] if candidates else _OMIT


def _call(entry: Any, j: int, tools: dict[str, ToolSpec] | None = None) -> Call:
    f = f"ground_truth[{j}]"
    if not isinstance(entry, dict) or len(entry) != 1:
        raise FieldError(f, "expected {function name: {argument: [accepted values]}}")
    ((name, args),) = entry.items()
    if not isinstance(args, dict):
        raise FieldError(f"{f}.{name}", "expected an object of arguments")
    arguments, accepted = {}, {}
    for k, values in args.items():
        if not isinstance(values, list) or not values:
            raise FieldError(f"{f}.{name}.{k}", "expected a non-empty list of accepted values")
        accepted[k] = values
        tool = (tools or {}).get(name)
        props = tool.parameters.get("properties", {}) if tool else {}
        if tool is not None and k not in props:
            # A few answers list an argument the function does not declare; BFCL's
            # checker rejects it when given ("unexpected_param"), so omit it when allowed.
            if "" in values:
                continue
            raise FieldError(
                f"{f}.{name}.{k}",
                f"not a parameter of {name} and not optional: no call passes BFCL's checker",
            )
        chosen = _choose(values, props.get(k) if isinstance(props.get(k), dict) else None)
        if chosen is not _OMIT:
            arguments[k] = chosen
    return Call(name=name, arguments=arguments, accepted=accepted)


def convert(raw: Any, answer: Any | None, category: str) -> TaskRecord:
    if isinstance(raw, FieldError):
        raise raw
    rid = require(raw, "id", str)
    functions = require(raw, "function", list)
    tools = [tool_spec(fn, i) for i, fn in enumerate(functions)]
    if category in NO_ANSWER:
        gold: list[list[Call]] = []
    else:
        if answer is None:
            raise FieldError("possible_answer", f"no ground truth for id {rid!r}")
        if isinstance(answer, FieldError):
            raise FieldError(f"possible_answer.{answer.field}", answer.message)
        gt = require(answer, "ground_truth", list, "possible_answer.ground_truth")
        by_name = {t.name: t for t in tools}
        gold = [[_call(e, j, by_name) for j, e in enumerate(gt)]] if gt else []
    return TaskRecord(
        id=f"bfcl-{rid}",
        source=SOURCE,
        domain=category,
        split="eval",
        messages=_messages(raw.get("question")),
        tools=tools,
        gold=gold,
        eval_only=True,
    )


def items(categories: list[str], root: Path | None = None) -> Iterator[SourceItem]:
    root = root or data_dir()
    for cat in categories:
        qpath = root / f"BFCL_v4_{cat}.json"
        if not qpath.exists():
            raise FileNotFoundError(f"bfcl: {qpath} not found")
        answers: dict[str, Any] = {}
        apath = root / "possible_answer" / f"BFCL_v4_{cat}.json"
        if cat not in NO_ANSWER:
            for n, a in read_jsonl(apath):
                if isinstance(a, dict) and isinstance(a.get("id"), str):
                    answers[a["id"]] = a
                elif not isinstance(a, FieldError):
                    answers[f"<line {n}>"] = FieldError("id", f"line {n}: missing id")
        for n, raw in read_jsonl(qpath):
            rid = raw.get("id") if isinstance(raw, dict) else None
            ref = f"{qpath.name} line {n}" + (f" (id {rid})" if rid else "")
            yield SourceItem(
                ref,
                lambda raw=raw, rid=rid, cat=cat, answers=answers: convert(
                    raw, answers.get(rid), cat
                ),
            )
