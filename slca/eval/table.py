"""The per-task lines of an evaluation as one table (``mlflow.log_table``): a row per
task, with the raw model output, the calls parsed from it, the verdict and the reward
parts, so the MLflow UI can show and compare two runs task by task."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from slca.eval.in_domain import SUCCESS_THRESHOLD, TOLERANCE

COLUMNS = (
    "set",
    "task_id",
    "verdict",
    "process",
    "summary",
    "reward",
    "valid",
    "error_type",
    "calls",
    "redundant",
    "finish",
    "output",
    "parsed_calls",
    "call_errors",
)
"""The table's columns: where a task is from, the verdict (``pass``/``fail``, or
``too_long`` when its prompt did not fit), the reward parts of its set (in-domain:
``process`` R_tool and ``summary`` R_summary; BFCL: ``valid`` and ``error_type``; τ²:
``reward``), the calls made and how many were redundant, why generation stopped, and
what the model wrote: each turn's text, the calls parsed from them (with the responses
they got), the errors of malformed call blocks."""

TURN_SEPARATOR = "\n--- turn ---\n"
"""Between two policy turns of ``output``."""


def verdict(line: Mapping[str, Any]) -> str:
    """``pass`` or ``fail`` by the set's own bar (in-domain: Success@0.9; BFCL: the
    checker's; τ²: reward 1), ``too_long`` for a task that never ran."""
    if line.get("finish") == "too_long":
        return "too_long"
    if "valid" in line:
        return "pass" if line["valid"] else "fail"
    if "reward" in line:
        return "pass" if line["reward"] >= 1.0 else "fail"
    process = line.get("process")
    return "pass" if process is not None and process >= SUCCESS_THRESHOLD - TOLERANCE else "fail"


def evaluation_table(lines: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Column name → values, a row per line (what ``MlflowClient.log_table`` takes)."""
    table: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    for line in lines:
        turns = line.get("turns") or []
        calls = line.get("calls")
        row = {
            **{c: line.get(c) for c in ("set", "task_id", "process", "summary", "reward")},
            **{c: line.get(c) for c in ("valid", "error_type", "redundant", "finish")},
            "verdict": verdict(line),
            "calls": calls if calls is not None else sum(len(t["calls"]) for t in turns),
            "output": TURN_SEPARATOR.join(t["text"] for t in turns),
            "parsed_calls": json.dumps([c for t in turns for c in t["calls"]], sort_keys=True),
            "call_errors": json.dumps([e for t in turns for e in t["call_errors"]]),
        }
        for column in COLUMNS:
            table[column].append(row[column])
    return table
