"""NESTFUL (``nestful-wrapper``, Apache-2.0): nested API-call sequences. In-domain.

Data ship as a separate top-level package ``data_v1`` in the same wheel:
``data_v1/executable/executable-{data,spec}.json``,
``data_v1/non-executable/non-executable-{glaive,sgd}-{data,spec}.json`` and
``data_v1/complexfuncbench/complexfuncbench-{data,spec}.json`` (JSON arrays).

A sample's ``output`` is a call sequence; each call has a ``label`` (``var1``) and later
arguments may be whole-value references ``$var1.skyId$``. They are kept as they are
(``Call.label`` and the argument strings). Calls are grouped into steps by dependency
depth: a call runs in the first step after every result it references, so independent
calls share a step (they may run in parallel) and every reference points to an earlier
step. The closing ``var_result`` pseudo-call (which results the answer reports) becomes
``facts``. The task's tools are the specs of the APIs the sequence uses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slca.data.checks import is_reference
from slca.data.record import REFERENCE_RE, Call, Message, TaskRecord, ToolSpec
from slca.data.sources import FieldError, SourceItem, package_dir, require
from slca.data.sources.schema_dialect import to_json_schema

SOURCE = "nestful"
FILES = {
    "executable": ("executable/executable-data.json", "executable/executable-spec.json"),
    "glaive": (
        "non-executable/non-executable-glaive-data.json",
        "non-executable/non-executable-glaive-spec.json",
    ),
    "sgd": (
        "non-executable/non-executable-sgd-data.json",
        "non-executable/non-executable-sgd-spec.json",
    ),
    "complexfuncbench": (
        "complexfuncbench/complexfuncbench-data.json",
        "complexfuncbench/complexfuncbench-spec.json",
    ),
}
RESULT = "var_result"


def data_dir() -> Path:
    return package_dir("data_v1", "nestful-wrapper")


def spec_to_tool(spec: Any, where: str) -> ToolSpec:
    name = require(spec, "name", str, f"{where}.name")
    qp = spec.get("query_parameters") or {}
    if not isinstance(qp, dict):
        raise FieldError(f"{where}.query_parameters", "expected an object")
    props, required = {}, []
    for k, p in qp.items():
        f = f"{where}.query_parameters.{k}"
        node = dict(p) if isinstance(p, dict) else {}
        if isinstance(node.get("allowed_values"), list) and node["allowed_values"]:
            node["enum"] = node["allowed_values"]
        if "default_value" in node and "default" not in node:
            node["default"] = node["default_value"]
        if node.get("required") is True:
            required.append(k)
        node.pop("required", None)
        props[k] = to_json_schema(node, f)
    params: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        params["required"] = required
    op = spec.get("output_parameters")
    response = None
    if isinstance(op, dict) and op:
        response = {
            "type": "object",
            "properties": {
                k: to_json_schema(v, f"{where}.output_parameters.{k}") for k, v in op.items()
            },
        }
    return ToolSpec(
        name=name, description=spec.get("description") or "", parameters=params, response=response
    )


def _refs(value: Any) -> set[str]:
    """Labels referenced anywhere inside an argument value."""
    if is_reference(value):
        return {REFERENCE_RE.match(value).group("label")}
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value)) if value else set()
    if isinstance(value, dict):
        return set().union(*(_refs(v) for v in value.values())) if value else set()
    return set()


def convert(raw: Any, catalog: dict[str, ToolSpec], subset: str, index: int) -> TaskRecord:
    text = require(raw, "input", str)
    output = require(raw, "output", list)
    depth: dict[str, int] = {}
    steps: list[list[Call]] = []
    used: list[str] = []
    facts: dict[str, Any] = {}
    for j, c in enumerate(output):
        f = f"output[{j}]"
        name = require(c, "name", str, f"{f}.name")
        args = require(c, "arguments", dict, f"{f}.arguments") if "arguments" in c else {}
        if name == RESULT:
            facts.update(args)
            continue
        if name not in catalog:
            raise FieldError(f"{f}.name", f"API {name!r} is not in the {subset} spec")
        level = 0
        for k, v in args.items():
            for label in _refs(v):
                if label not in depth:
                    raise FieldError(
                        f"{f}.arguments.{k}",
                        f"references {label!r}, not the label of an earlier call",
                    )
                level = max(level, depth[label] + 1)
        label = c.get("label")
        if label is not None:
            if not isinstance(label, str) or label in depth:
                raise FieldError(f"{f}.label", f"invalid or repeated label {label!r}")
            depth[label] = level
        while len(steps) <= level:
            steps.append([])
        steps[level].append(Call(name=name, arguments=args, label=label))
        if name not in used:
            used.append(name)
    if isinstance(raw.get(RESULT), dict):
        facts.update(raw[RESULT])
    return TaskRecord(
        id=f"nestful-{subset}-{index:04d}",
        source=SOURCE,
        domain=subset,
        split="train",
        messages=[Message(role="user", content=text.strip())],
        tools=[catalog[n] for n in used],
        gold=steps,
        facts=facts,
        eval_only=False,
    )


def items(subsets: list[str], root: Path | None = None) -> Iterator[SourceItem]:
    root = root or data_dir()
    for subset in subsets:
        data_rel, spec_rel = FILES[subset]
        spec_path, data_path = root / spec_rel, root / data_rel
        specs = json.loads(spec_path.read_text(encoding="utf-8"))
        if not isinstance(specs, list):
            raise FieldError(spec_rel, "expected a JSON array of API specs")
        catalog: dict[str, ToolSpec] = {}
        for i, s in enumerate(specs):
            try:
                tool = spec_to_tool(s, f"[{i}]")
            except (FieldError, ValueError) as e:
                raise ValueError(f"nestful: {spec_rel} [{i}]: {e}") from None
            catalog[tool.name] = tool
        data = json.loads(data_path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise FieldError(data_rel, "expected a JSON array of samples")
        for i, raw in enumerate(data):
            yield SourceItem(
                f"{data_rel} [{i}]",
                lambda raw=raw, i=i, subset=subset, catalog=catalog: convert(
                    raw, catalog, subset, i
                ),
            )
