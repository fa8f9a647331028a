"""The ``validate`` step: a Great Expectations (1.x, ephemeral context) suite over the
parquet files that ``prepare`` wrote.

Expectations: ids non-null and unique; splits known; eval-only records only in the eval
split; every tool's ``parameters``/``response`` a valid JSON Schema; every gold call names
a tool of its task with arguments matching that tool's ``parameters`` (custom column-pair
expectation: the schema differs per row); no request key (near-duplicate class) in two
splits. Writes ``ge_results.json`` and Data Docs HTML into ``report_dir`` and fails with
a message naming each failed expectation and example record ids.

``python -m slca.data.validate [--params params.yaml]`` is what the DVC stage runs;
:func:`validate_dir` is what a Prefect task calls. Great Expectations is imported here
only: it is part of the ``data`` extra.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from slca.data import io
from slca.data.checks import gold_problems, schema_problems
from slca.data.params import load_params
from slca.data.record import SPLITS
from slca.data.splits import request_key

SUITE = "slca_task_data"


def _ok_tools(v: Any) -> bool:
    try:
        return not schema_problems(json.loads(v))
    except (TypeError, ValueError):
        return False


def _ok_gold(tools: Any, gold: Any) -> bool:
    try:
        return not gold_problems(json.loads(tools), json.loads(gold))
    except (TypeError, ValueError, AttributeError):
        return False


def _user_key(messages: Any) -> str:
    try:
        return request_key(
            "\n".join(m["content"] for m in json.loads(messages) if m.get("role") == "user")
        )
    except (TypeError, ValueError, KeyError, AttributeError):
        return ""


_registered: dict[str, type] = {}
_PAIR_DOMAIN_KEYS = (
    "batch_id",
    "table",
    "column_A",
    "column_B",
    "row_condition",
    "condition_parser",
    "ignore_row_if",
)


def _expectations() -> dict[str, type]:
    """Define (once) the custom metrics and expectations; GE registers them by class."""
    if _registered:
        return _registered
    from great_expectations.execution_engine import PandasExecutionEngine
    from great_expectations.expectations.expectation import (
        ColumnMapExpectation,
        ColumnPairMapExpectation,
    )
    from great_expectations.expectations.metrics.map_metric_provider import (
        ColumnMapMetricProvider,
        ColumnPairMapMetricProvider,
        column_condition_partial,
        column_pair_condition_partial,
    )

    class ColumnValuesValidToolSchemas(ColumnMapMetricProvider):
        condition_metric_name = "column_values.slca_valid_tool_schemas"

        @column_condition_partial(engine=PandasExecutionEngine)
        def _pandas(cls, column, **kwargs):
            return column.map(_ok_tools)

    class ColumnPairGoldMatchesTools(ColumnPairMapMetricProvider):
        condition_metric_name = "column_pair_values.slca_gold_matches_tools"
        condition_domain_keys = (
            "batch_id",
            "table",
            "column_A",
            "column_B",
            "row_condition",
            "condition_parser",
            "ignore_row_if",
        )

        @column_pair_condition_partial(engine=PandasExecutionEngine)
        def _pandas(cls, column_A, column_B, **kwargs):
            return pd.Series(
                [_ok_gold(a, b) for a, b in zip(column_A, column_B, strict=True)],
                index=column_A.index,
            )

    class ColumnPairKeyInOneSplit(ColumnPairMapMetricProvider):
        condition_metric_name = "column_pair_values.slca_key_in_one_split"
        condition_domain_keys = ColumnPairGoldMatchesTools.condition_domain_keys

        @column_pair_condition_partial(engine=PandasExecutionEngine)
        def _pandas(cls, column_A, column_B, **kwargs):
            n = pd.DataFrame({"k": column_A, "s": column_B}).groupby("k")["s"].transform("nunique")
            return n == 1

    class ExpectColumnValuesToBeValidToolSchemas(ColumnMapExpectation):
        """Each tool's parameters and response (when given) is a valid JSON Schema."""

        map_metric = "column_values.slca_valid_tool_schemas"
        success_keys = ("mostly",)

    class ExpectGoldCallsToMatchToolSchemas(ColumnPairMapExpectation):
        """Each gold call names a tool of its row and matches that tool's parameters."""

        map_metric = "column_pair_values.slca_gold_matches_tools"
        success_keys = ("mostly",)
        domain_keys = _PAIR_DOMAIN_KEYS
        ignore_row_if: str = "neither"

    class ExpectRequestKeysToStayInOneSplit(ColumnPairMapExpectation):
        """No near-duplicate request class (column A) appears in two splits (column B)."""

        map_metric = "column_pair_values.slca_key_in_one_split"
        success_keys = ("mostly",)
        domain_keys = _PAIR_DOMAIN_KEYS
        ignore_row_if: str = "neither"

    _registered.update(
        tools=ExpectColumnValuesToBeValidToolSchemas,
        gold=ExpectGoldCallsToMatchToolSchemas,
        split_keys=ExpectRequestKeysToStayInOneSplit,
        _metrics=(
            ColumnValuesValidToolSchemas,
            ColumnPairGoldMatchesTools,
            ColumnPairKeyInOneSplit,
        ),
    )
    return _registered


def _exception_message(info: dict) -> str:
    if "exception_message" in info:
        return str(info["exception_message"])
    return (
        "; ".join(str(v.get("exception_message")) for v in info.values() if isinstance(v, dict))
        or "unknown error"
    )


def load_frame(in_dir: str | Path) -> pd.DataFrame:
    """Every split file as one frame, plus the derived ``request_key`` column."""
    in_dir = Path(in_dir)
    frames = [
        pq.read_table(p).to_pandas() for s in SPLITS if (p := in_dir / f"{s}.parquet").exists()
    ]
    if not frames:
        raise FileNotFoundError(f"{in_dir}: no split parquet files (run prepare first)")
    df = pd.concat(frames, ignore_index=True)
    missing = [c for c in io.COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{in_dir}: missing columns {missing}")
    df["request_key"] = df["messages"].map(_user_key)
    return df


def build_suite():
    import great_expectations as gx
    import great_expectations.expectations as gxe

    custom = _expectations()
    suite = gx.ExpectationSuite(name=SUITE)
    for e in (
        gxe.ExpectColumnValuesToNotBeNull(column="id"),
        gxe.ExpectColumnValuesToBeUnique(column="id"),
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=list(SPLITS)),
        gxe.ExpectColumnPairValuesToBeInSet(
            column_A="eval_only",
            column_B="split",
            value_pairs_set=[(False, s) for s in SPLITS] + [(True, "eval")],
        ),
        custom["tools"](column="tools"),
        custom["gold"](column_A="tools", column_B="gold"),
        custom["split_keys"](column_A="request_key", column_B="split"),
    ):
        suite.add_expectation(e)
    return suite


def run_suite(
    df: pd.DataFrame, report_dir: str | Path | None = None, max_examples: int = 5, suite: Any = None
) -> tuple[bool, list[str], dict[str, Any]]:
    """Validate a frame; returns (success, failure messages, GE result as JSON data).

    ``suite`` defaults to :func:`build_suite` (benchmarks pass a one-expectation suite).
    """
    import great_expectations as gx

    ctx = gx.get_context(mode="ephemeral")
    docs_dir = None
    if report_dir is not None:
        docs_dir = Path(tempfile.mkdtemp(prefix="ge-docs-"))
        ctx.add_data_docs_site(
            site_name="local",
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": str(docs_dir),
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
    batch_def = (
        ctx.data_sources.add_pandas("tasks")
        .add_dataframe_asset("records")
        .add_batch_definition_whole_dataframe("all")
    )
    suite = ctx.suites.add(suite if suite is not None else build_suite())
    vdef = ctx.validation_definitions.add(
        gx.ValidationDefinition(name="tasks", data=batch_def, suite=suite)
    )
    actions = []
    if docs_dir is not None:
        actions = [gx.checkpoint.UpdateDataDocsAction(name="docs", site_names=["local"])]
    cp = ctx.checkpoints.add(
        gx.Checkpoint(
            name="tasks",
            validation_definitions=[vdef],
            actions=actions,
            result_format={
                "result_format": "COMPLETE",
                "unexpected_index_column_names": ["id"],
                "partial_unexpected_count": max_examples,
            },
        )
    )
    cp_result = cp.run(batch_parameters={"dataframe": df})
    (vres,) = cp_result.run_results.values()
    data = vres.to_json_dict()
    failures = []
    for r in vres.results:
        if r.success:
            continue
        cfg = r.expectation_config
        res = r.result or {}
        ids = [
            x.get("id") if isinstance(x, dict) else x
            for x in (res.get("unexpected_index_list") or [])
        ][:max_examples]
        kw = {k: v for k, v in cfg.kwargs.items() if k in ("column", "column_A", "column_B")}
        if r.exception_info and r.exception_info.get("raised_exception") is not False:
            failures.append(
                f"{cfg.type} {kw}: could not be evaluated: {_exception_message(r.exception_info)}"
            )
            continue
        failures.append(
            f"{cfg.type} {kw}: {res.get('unexpected_count', '?')} of "
            f"{res.get('element_count', '?')} records fail, e.g. ids {ids}"
        )
    if report_dir is not None:
        with io.atomic_dir(report_dir) as tmp:
            (tmp / "ge_results.json").write_text(
                json.dumps(data, indent=2, sort_keys=True, default=str)
            )
            shutil.copytree(docs_dir, tmp / "data_docs")
        shutil.rmtree(docs_dir, ignore_errors=True)
    return bool(vres.success), failures, data


def validate_dir(
    in_dir: str | Path, report_dir: str | Path | None, max_examples: int = 5
) -> tuple[bool, list[str]]:
    ok, failures, _ = run_suite(load_frame(in_dir), report_dir, max_examples)
    return ok, failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slca.data.validate")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    try:
        v = load_params(args.params).validate_
        ok, failures = validate_dir(v.in_dir, v.report_dir, v.max_examples)
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
