"""The ``simulator_check`` step: SGLS over every gold call of a split, validated with GE.

Each gold call of each task of the split is sent to the simulator (in order, one
scope per task, the task's world state as context). NESTFUL-style references in
arguments (``$var1.id$``) are resolved from the responses of earlier steps; a call
whose reference cannot be resolved (the referenced response lacks the field), or
whose arguments the data does not give (``arguments_known`` false), is recorded but
not simulated. The responses form a table validated by a Great
Expectations suite:

- every simulated response is non-empty;
- every non-error response matches its tool's response schema (checked with the
  Python ``jsonschema`` validator, a second opinion on the simulator's own);
- no valid gold call gets an error, beyond ``max_error_rate``.

``python -m slca.simulator.check --params params.yaml [-S key=value]`` is what the DVC
stage runs; :func:`validate_simulator` is what a Prefect task calls.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd

from slca.config import ConfigError, overrides_of, parse_section, read_params
from slca.config.loader import stage_parser
from slca.config.simulator import SimulatorCheckParams, SimulatorConfig
from slca.data import ge, io
from slca.data.record import REFERENCE_RE, TaskRecord
from slca.jsonutil import MISSING, canonical_json, walk
from slca.simulator.core import Simulator, is_error

SUITE = "slca_simulator"


def resolve_references(
    arguments: Mapping[str, Any], results: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Arguments with ``$label.path$`` values replaced from earlier results, or None.

    ``results`` maps a gold call's label to its response; ``path`` walks dict keys
    and list indices. None when any reference does not resolve.
    """
    out = {}
    for key, value in arguments.items():
        match = REFERENCE_RE.match(value) if isinstance(value, str) else None
        if match is None:
            out[key] = value
            continue
        parts = [match.group("label"), *filter(None, match.group("path").split("."))]
        node = walk(results, parts)
        if node is MISSING:
            return None
        out[key] = node
    return out


def _absent(cell: Any) -> bool:
    """pandas stores a missing JSON cell as None or NaN."""
    return cell is None or (isinstance(cell, float) and cell != cell)


def simulate_gold_calls(records: Iterable[TaskRecord], simulator: Simulator) -> pd.DataFrame:
    """One row per gold call: what was asked, what came back, and with which schema."""
    rows = []
    for record in records:
        tools = [tool.model_dump() for tool in record.tools]
        schemas = {tool.name: tool.response for tool in record.tools}
        context = {"world": record.world} if record.world else {}
        results: dict[str, Any] = {}
        for i, step in enumerate(record.gold):
            for j, call in enumerate(step):
                # a call the data names without its arguments cannot be asked
                arguments = (
                    resolve_references(call.arguments, results) if call.arguments_known else None
                )
                response = None
                if arguments is not None:
                    response = simulator.execute(
                        tools, call.name, arguments, context=context, scope=record.id
                    )
                    if call.label:
                        results[call.label] = response
                schema = schemas.get(call.name)
                rows.append(
                    {
                        "id": f"{record.id}/{i}.{j}",
                        "record_id": record.id,
                        "source": record.source,
                        "tool": call.name,
                        "arguments": canonical_json(
                            arguments if arguments is not None else call.arguments
                        ),
                        "simulated": arguments is not None,
                        "response": None if response is None else canonical_json(response),
                        "error_code": response["error"]["code"] if is_error(response) else None,
                        "response_schema": None if schema is None else canonical_json(schema),
                    }
                )
    columns = [
        "id",
        "record_id",
        "source",
        "tool",
        "arguments",
        "simulated",
        "response",
        "error_code",
        "response_schema",
    ]
    return pd.DataFrame(rows, columns=columns)


def _non_empty(response: Any) -> bool:
    return _absent(response) or json.loads(response) not in ({}, [], "", None)


def _matches_schema(response: Any, schema: Any) -> bool:
    if _absent(response) or _absent(schema):
        return True
    value = json.loads(response)
    return is_error(value) or jsonschema.Draft202012Validator(json.loads(schema)).is_valid(value)


def build_suite(max_error_rate: float) -> list[Any]:
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column

    non_empty = ge.column_expectation(
        "ExpectSimulatorResponsesToBeNonEmpty",
        ge.rowwise(_non_empty),
        "Every simulated response carries content.",
    )
    matches = ge.pair_expectation(
        "ExpectSimulatorResponsesToMatchTheirSchema",
        ge.rowwise(_matches_schema),
        "Every non-error response validates against its tool's response schema.",
    )
    return [
        gxe.ExpectColumnValuesToNotBeNull(column="id"),
        gxe.ExpectColumnValuesToBeUnique(column="id"),
        non_empty(column="response"),
        matches(column_A="response", column_B="response_schema"),
        gxe.ExpectColumnValuesToBeNull(
            column="error_code",
            mostly=1.0 - max_error_rate,
            row_condition=Column("simulated") == True,  # noqa: E712 (builds a GE condition)
        ),
    ]


def validate_simulator(params: SimulatorCheckParams) -> tuple[bool, list[str], dict[str, Any]]:
    """Run the step; returns (success, failure messages, summary). Writes ``report_dir``."""
    records = io.read_dataset(params.in_dir, [params.split])
    if params.sources is not None:
        records = [r for r in records if r.source in params.sources]
    if not records:
        of = f" of sources {params.sources}" if params.sources is not None else ""
        raise FileNotFoundError(
            f"{params.in_dir}: no records{of} in split {params.split!r} (run prepare first)"
        )
    with Simulator(params.backend, seed=params.seed) as simulator:
        table = simulate_gold_calls(records, simulator)
        stats = simulator.stats.as_metrics()
    simulated = table[table["simulated"]]
    codes = simulated["error_code"].dropna()
    summary = {
        "split": params.split,
        "sources": params.sources,
        "backend": params.backend,
        "tasks": len(records),
        "gold_calls": len(table),
        "simulated": len(simulated),
        "unresolved_references": int((~table["simulated"]).sum()),
        "errors": dict(Counter(codes)),
        "error_rate": len(codes) / len(simulated) if len(simulated) else 0.0,
        "simulator": stats,
    }
    ok, failures, _ = ge.run_suite(
        table,
        build_suite(params.max_error_rate),
        name=SUITE,
        report_dir=params.report_dir,
        max_examples=params.max_examples,
        extra_files={
            "responses.parquet": lambda path: table.to_parquet(path, index=False),
            "summary.json": lambda path: path.write_text(json.dumps(summary, indent=2) + "\n"),
        },
    )
    return ok, failures, summary


def check_params(document: Mapping[str, Any], path: str | Path) -> SimulatorCheckParams:
    """The ``simulator_check`` section of a params ``document`` (read from ``path``),
    refused when its backend is not ``train.simulator.backend``: the check must
    validate the simulator that training explores against, not another one."""
    params = parse_section(document, "simulator_check", SimulatorCheckParams, path)
    trained = parse_section(document, "train.simulator", SimulatorConfig, path).backend
    if params.backend != trained:
        raise ConfigError(
            f"{path}: simulator_check.backend: {params.backend!r}, but training explores "
            f"against train.simulator.backend {trained!r}; the check would validate a "
            "backend training never uses (set both alike)"
        )
    return params


def load_params(
    path: str | Path, overrides: Mapping[str, Any] | None = None
) -> SimulatorCheckParams:
    """The ``simulator_check`` section, read strictly (:mod:`slca.config`, with ``-S``
    ``overrides``) and checked against ``train.simulator`` (:func:`check_params`)."""
    return check_params(read_params(path, overrides), path)


def main(argv: list[str] | None = None) -> int:
    from slca.processes import end_like_ctrl_c

    end_like_ctrl_c()
    parser = stage_parser(
        "python -m slca.simulator.check",
        "simulator_check.split=test",
        description=__doc__.splitlines()[0],
    )
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params, overrides_of(args))
        ok, failures, summary = validate_simulator(params)
    except (ValueError, FileNotFoundError) as exc:
        print(f"simulator_check failed: {exc}", file=sys.stderr)
        return 1
    line = (
        f"{summary['simulated']} of {summary['gold_calls']} gold calls simulated, "
        f"error rate {summary['error_rate']:.3f}"
    )
    if not ok:
        print(f"simulator_check failed ({line}):\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print(f"simulator_check: {line}; all expectations met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
