"""Great Expectations plumbing shared by the validation steps (task data, simulator).

GE 1.x with an ephemeral context: a suite runs over a pandas frame, results are
written as JSON plus Data Docs HTML into a report directory (built beside it, then
renamed), and every failed expectation becomes one line naming the expectation and
example record ids. Great Expectations is imported only when a function here runs:
it belongs to the ``data`` extra.

Per-row checks whose rule differs per row (a schema stored in another column) are
custom column / column-pair map expectations built by :func:`column_expectation`
and :func:`pair_expectation` from plain pandas functions.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from slca.data import io

_PAIR_DOMAIN_KEYS = (
    "batch_id",
    "table",
    "column_A",
    "column_B",
    "row_condition",
    "condition_parser",
    "ignore_row_if",
)
_built: dict[str, type] = {}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def column_expectation(class_name: str, check: Callable[[pd.Series], pd.Series], doc: str) -> type:
    """A column map expectation ``class_name`` whose rows pass where ``check`` is True.

    GE registers expectations and metrics by class; each name is built once.
    """
    if class_name in _built:
        return _built[class_name]
    from great_expectations.expectations.expectation import ColumnMapExpectation
    from great_expectations.expectations.metrics.map_metric_provider import (
        ColumnMapMetricProvider,
        column_condition_partial,
    )

    def _pandas(cls, column, **kwargs):  # GE passes the column by this name
        return check(column)

    return _register(
        class_name,
        doc,
        metric=f"column_values.slca_{_snake(class_name)}",
        provider=ColumnMapMetricProvider,
        condition=column_condition_partial,
        pandas=_pandas,
        expectation=ColumnMapExpectation,
    )


def pair_expectation(
    class_name: str, check: Callable[[pd.Series, pd.Series], pd.Series], doc: str
) -> type:
    """A column-pair map expectation whose rows pass where ``check(A, B)`` is True."""
    if class_name in _built:
        return _built[class_name]
    from great_expectations.expectations.expectation import ColumnPairMapExpectation
    from great_expectations.expectations.metrics.map_metric_provider import (
        ColumnPairMapMetricProvider,
        column_pair_condition_partial,
    )

    def _pandas(cls, column_A, column_B, **kwargs):  # GE passes the columns by these names
        return check(column_A, column_B)

    return _register(
        class_name,
        doc,
        metric=f"column_pair_values.slca_{_snake(class_name)}",
        provider=ColumnPairMapMetricProvider,
        condition=column_pair_condition_partial,
        pandas=_pandas,
        expectation=ColumnPairMapExpectation,
        metric_attributes={"condition_domain_keys": _PAIR_DOMAIN_KEYS},
        expectation_attributes={
            "domain_keys": _PAIR_DOMAIN_KEYS,
            "ignore_row_if": "neither",
            "__annotations__": {"ignore_row_if": str},
        },
    )


def _register(
    class_name: str,
    doc: str,
    *,
    metric: str,
    provider: type,
    condition: Callable[..., Any],
    pandas: Callable[..., pd.Series],
    expectation: type,
    metric_attributes: Mapping[str, Any] | None = None,
    expectation_attributes: Mapping[str, Any] | None = None,
) -> type:
    """Define the metric ``metric`` (a ``provider`` subclass whose pandas condition is
    ``pandas``, wrapped by GE's ``condition`` partial; defining it registers it) and the
    ``expectation`` subclass ``class_name`` that reads it; kept in ``_built``."""
    from great_expectations.execution_engine import PandasExecutionEngine

    type(
        f"{class_name}Metric",
        (provider,),
        {
            "condition_metric_name": metric,
            "_pandas": condition(engine=PandasExecutionEngine)(pandas),
            **(metric_attributes or {}),
        },
    )
    _built[class_name] = type(
        class_name,
        (expectation,),
        {
            "__doc__": doc,
            "map_metric": metric,
            "success_keys": ("mostly",),
            **(expectation_attributes or {}),
        },
    )
    return _built[class_name]


def rowwise(predicate: Callable[..., bool]) -> Callable[..., pd.Series]:
    """Lift a per-row predicate over one or two columns to a column function."""

    def check(*columns: pd.Series) -> pd.Series:
        return pd.Series(
            [bool(predicate(*values)) for values in zip(*columns, strict=True)],
            index=columns[0].index,
        )

    return check


def run_suite(
    df: pd.DataFrame,
    expectations: list[Any],
    *,
    name: str,
    report_dir: str | Path | None = None,
    id_column: str = "id",
    max_examples: int = 5,
    extra_files: Mapping[str, Callable[[Path], None]] | None = None,
) -> tuple[bool, list[str], dict[str, Any]]:
    """Validate ``df``; returns (success, one message per failed expectation, GE result).

    With ``report_dir``, it is replaced as a whole by ``ge_results.json``,
    ``data_docs/`` and each of ``extra_files`` (file name → function writing that path).
    """
    import great_expectations as gx

    docs_dir = None if report_dir is None else Path(tempfile.mkdtemp(prefix="ge-docs-"))
    ctx = _context(docs_dir)
    suite = gx.ExpectationSuite(name=name)
    for expectation in expectations:
        suite.add_expectation(expectation)
    batch_def = (
        ctx.data_sources.add_pandas(name)
        .add_dataframe_asset("rows")
        .add_batch_definition_whole_dataframe("all")
    )
    vdef = ctx.validation_definitions.add(
        gx.ValidationDefinition(name=name, data=batch_def, suite=ctx.suites.add(suite))
    )
    actions = []
    if docs_dir is not None:
        actions = [gx.checkpoint.UpdateDataDocsAction(name="docs", site_names=["local"])]
    checkpoint = ctx.checkpoints.add(
        gx.Checkpoint(
            name=name,
            validation_definitions=[vdef],
            actions=actions,
            result_format={
                "result_format": "COMPLETE",
                "unexpected_index_column_names": [id_column],
                "partial_unexpected_count": max_examples,
            },
        )
    )
    (result,) = checkpoint.run(batch_parameters={"dataframe": df}).run_results.values()
    data = result.to_json_dict()
    failures = [_describe(r, id_column, max_examples) for r in result.results if not r.success]
    if report_dir is not None:
        with io.atomic_dir(report_dir) as tmp:
            (tmp / "ge_results.json").write_text(
                json.dumps(data, indent=2, sort_keys=True, default=str)
            )
            shutil.copytree(docs_dir, tmp / "data_docs")
            for filename, write in (extra_files or {}).items():
                write(tmp / filename)
        shutil.rmtree(docs_dir, ignore_errors=True)
    return bool(result.success), failures, data


def _context(docs_dir: Path | None) -> Any:
    """A quiet ephemeral GE context; with ``docs_dir``, a Data Docs site built there."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    # GE's default ephemeral context draws a tqdm bar per expectation's metrics and logs
    # the temp directory of a docs site it never builds here: noise in a pipeline's log
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        progress_bars=ProgressBarsConfig(globally=False),
    )
    ctx = gx.get_context(mode="ephemeral", project_config=config)
    if docs_dir is not None:
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
    return ctx


def _describe(r: Any, id_column: str, max_examples: int) -> str:
    cfg = r.expectation_config
    res = r.result or {}
    shown = ("column", "column_A", "column_B", "row_condition", "min_value", "max_value")
    kw = {k: v for k, v in cfg.kwargs.items() if k in shown and v is not None}
    if r.exception_info and r.exception_info.get("raised_exception") is not False:
        return f"{cfg.type} {kw}: could not be evaluated: {_exception_message(r.exception_info)}"
    if "observed_value" in res and "unexpected_count" not in res:  # a table-level check
        return f"{cfg.type} {kw}: observed {res['observed_value']}"
    ids = [
        x.get(id_column) if isinstance(x, dict) else x
        for x in (res.get("unexpected_index_list") or [])
    ][:max_examples]
    return (
        f"{cfg.type} {kw}: {res.get('unexpected_count', '?')} of "
        f"{res.get('element_count', '?')} records fail, e.g. ids {ids}"
    )


def _exception_message(info: dict) -> str:
    if "exception_message" in info:
        return str(info["exception_message"])
    return (
        "; ".join(str(v.get("exception_message")) for v in info.values() if isinstance(v, dict))
        or "unknown error"
    )
