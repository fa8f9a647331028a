"""The ``validate`` step: a Great Expectations (1.x, ephemeral context) suite over the
parquet files that ``prepare`` wrote.

Expectations: every required column non-null, ids unique, each split (``min_rows``)
holding enough rows, every prompt holding a user turn; splits known; eval-only records
only in the eval split; every tool's ``parameters``/``response`` a valid JSON Schema;
every gold call names a tool of its task with arguments matching that tool's
``parameters`` (custom column-pair expectation: the schema differs per row); no request
key (near-duplicate class) in two splits. Writes ``ge_results.json`` and Data Docs HTML
into ``report_dir`` and fails with a message naming each failed expectation and example
record ids.

``python -m slca.data.validate [--params params.yaml] [-S key=value]`` is what the DVC stage runs;
:func:`validate_dir` is what a Prefect task calls. Great Expectations is imported here
only: it is part of the ``data`` extra.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from slca.config.data import ValidateParams
from slca.config.loader import load_stage_section, stage_parser
from slca.data import ge, io
from slca.data.checks import gold_problems, schema_problems
from slca.data.limits import CEILING
from slca.data.record import SPLITS
from slca.data.splits import request_key

SUITE = "slca_task_data"


def _ok_tools(v: Any) -> bool:
    try:
        # the size limits were checked as the frame loaded; here only what must not crash
        return not schema_problems(json.loads(v), CEILING)
    except (TypeError, ValueError, RecursionError):
        return False


def _ok_gold(tools: Any, gold: Any) -> bool:
    try:
        return not gold_problems(json.loads(tools), json.loads(gold))
    except (TypeError, ValueError, AttributeError, RecursionError):
        return False


def _user_key(messages: Any) -> str:
    try:
        # the conversation's first user turn, as slca.data.splits groups them
        return request_key(
            next(m["content"] for m in json.loads(messages) if m.get("role") == "user")
        )
    except (TypeError, ValueError, KeyError, AttributeError, StopIteration):
        return ""


def _has_user_turn(messages: Any) -> bool:
    try:
        turns = json.loads(messages)
        return any(
            isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str)
            for m in turns
        )
    except (TypeError, ValueError):
        return False


def _keys_in_one_split(keys: pd.Series, splits: pd.Series) -> pd.Series:
    n = pd.DataFrame({"k": keys, "s": splits}).groupby("k")["s"].transform("nunique")
    return n == 1


#: Columns every record fills (``facts`` is ``{}`` when empty; ``world`` may be null).
REQUIRED = ("id", "source", "domain", "split", "eval_only", "messages", "tools", "gold", "facts")


def build_suite(min_rows: dict[str, int] | None = None) -> list[Any]:
    """The task-data expectations, in the order they are reported; ``min_rows`` is the
    fewest rows per split (default: the ``validate.min_rows`` default)."""
    import great_expectations.expectations as gxe

    min_rows = ValidateParams().min_rows if min_rows is None else min_rows
    user_turn = ge.column_expectation(
        "ExpectMessagesToHoldAUserTurn",
        ge.rowwise(_has_user_turn),
        "The prompt (a JSON list of messages) holds at least one user turn.",
    )

    valid_schemas = ge.column_expectation(
        "ExpectColumnValuesToBeValidToolSchemas",
        ge.rowwise(_ok_tools),
        "Each tool's parameters and response (when given) is a valid JSON Schema.",
    )
    gold_matches = ge.pair_expectation(
        "ExpectGoldCallsToMatchToolSchemas",
        ge.rowwise(_ok_gold),
        "Each gold call names a tool of its row and matches that tool's parameters.",
    )
    one_split = ge.pair_expectation(
        "ExpectRequestKeysToStayInOneSplit",
        _keys_in_one_split,
        "No near-duplicate request class (column A) appears in two splits (column B).",
    )
    return [
        *(gxe.ExpectColumnValuesToNotBeNull(column=c) for c in REQUIRED),
        gxe.ExpectColumnValuesToBeUnique(column="id"),
        *(
            gxe.ExpectTableRowCountToBeBetween(
                min_value=n, row_condition=f'split=="{split}"', condition_parser="pandas"
            )
            for split, n in min_rows.items()
        ),
        user_turn(column="messages"),
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=list(SPLITS)),
        gxe.ExpectColumnPairValuesToBeInSet(
            column_A="eval_only",
            column_B="split",
            value_pairs_set=[(False, s) for s in SPLITS] + [(True, "eval")],
        ),
        valid_schemas(column="tools"),
        gold_matches(column_A="tools", column_B="gold"),
        one_split(column_A="request_key", column_B="split"),
    ]


def load_frame(in_dir: str | Path) -> pd.DataFrame:
    """Every split file as one frame, plus the derived ``request_key`` column. A row
    over the dataset's size limits (:func:`slca.data.io.dataset_limits`) stops it with
    one line naming the file, the task and the reason: the suite's checks would crash
    on it (a schema nested thousands deep) or run out of memory."""
    in_dir = Path(in_dir)
    limits = io.dataset_limits(in_dir)
    frames = []
    for s in SPLITS:
        if (p := in_dir / f"{s}.parquet").exists():
            table = pq.read_table(p)
            if set(io.COLUMNS) <= set(table.column_names):  # else: refused below, by name
                io.check_rows(p, table.to_pylist(), limits)
            frames.append(table.to_pandas())
    if not frames:
        raise FileNotFoundError(f"{in_dir}: no split parquet files (run prepare first)")
    df = pd.concat(frames, ignore_index=True)
    missing = [c for c in io.COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{in_dir}: missing columns {missing}")
    df["request_key"] = df["messages"].map(_user_key)
    return df


def run_suite(
    df: pd.DataFrame,
    report_dir: str | Path | None = None,
    max_examples: int = 5,
    suite: list[Any] | None = None,
    min_rows: dict[str, int] | None = None,
) -> tuple[bool, list[str], dict[str, Any]]:
    """Validate a frame; returns (success, failure messages, GE result as JSON data).

    ``suite`` defaults to :func:`build_suite` (benchmarks pass a single expectation).
    """
    return ge.run_suite(
        df,
        suite if suite is not None else build_suite(min_rows),
        name=SUITE,
        report_dir=report_dir,
        max_examples=max_examples,
    )


def validate_dir(
    in_dir: str | Path,
    report_dir: str | Path | None,
    max_examples: int = 5,
    min_rows: dict[str, int] | None = None,
) -> tuple[bool, list[str]]:
    ok, failures, _ = run_suite(load_frame(in_dir), report_dir, max_examples, min_rows=min_rows)
    return ok, failures


def main(argv: list[str] | None = None) -> int:
    from slca.processes import end_like_ctrl_c

    end_like_ctrl_c()
    args = stage_parser("python -m slca.data.validate", "validate.max_examples=10").parse_args(argv)
    try:
        v = load_stage_section(args, "validate", ValidateParams)
        ok, failures = validate_dir(v.in_dir, v.report_dir, v.max_examples, v.min_rows)
    except (ValueError, FileNotFoundError) as e:
        print(f"validate failed: {e}", file=sys.stderr)
        return 1
    if not ok:
        print("validate failed:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print("validate: all expectations met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
