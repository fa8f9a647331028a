"""Prefect artifacts: what a flow run's page in the Prefect UI shows without opening a
file (ADR 0082).

- ``slca-comparison`` (markdown, the report task): the comparison report's tables and a
  link to every MLflow run it covers;
- ``slca-validation`` (table, the validate task): every data expectation, met or not;
- ``slca-train-<estimator>`` (link, the train flow): the RL stage's MLflow run.

They are built from what the library returns or writes (the report's files, the Great
Expectations result, a run id): ``slca`` imports no Prefect. Publishing is a courtesy:
one that fails (the server, the MLflow store) logs a warning and fails no step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)

from slca.tracking import resolve_uri

COMPARISON_KEY = "slca-comparison"
VALIDATION_KEY = "slca-validation"
#: Where ``slca ui`` serves the MLflow UI unless told another port (its ``--mlflow-port``).
MLFLOW_UI = "http://127.0.0.1:5000"


def artifact_key(*parts: str) -> str:
    """``parts`` joined as a Prefect artifact key: lowercase letters, digits and dashes
    (``dr_grpo`` → ``dr-grpo``)."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")


def training_key(estimator: str) -> str:
    return artifact_key("slca", "train", estimator)


def _where(tracking_uri: str) -> tuple[str, str]:
    """(base URL of the MLflow UI, how to open it) for runs in ``tracking_uri``: a
    tracking server serves its own UI; a SQLite store is served by ``slca ui``."""
    from slca.tracking.store import sqlite_path

    if tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/"), f"the tracking server {tracking_uri}"
    db = sqlite_path(tracking_uri)
    opened = f"slca ui --tracking-dir {db.parent}" if db is not None else "mlflow ui"
    return MLFLOW_UI, f"`{opened}` (store {tracking_uri})"


def run_urls(tracking_uri: str, run_ids: Iterable[str]) -> dict[str, str]:
    """The MLflow UI page of each run (``<ui>/#/experiments/<id>/runs/<run id>``)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    base, _ = _where(tracking_uri)
    urls = {}
    for run_id in run_ids:
        experiment = client.get_run(run_id).info.experiment_id
        urls[run_id] = f"{base}/#/experiments/{experiment}/runs/{run_id}"
    return urls


def comparison_markdown(report_path: str | Path, tracking_uri: str) -> str:
    """The report's text up to its first figure (title, tables, notes), then every arm's
    MLflow runs as links. ``summary.json`` beside ``report.md`` names the runs."""
    path = Path(report_path)
    text = path.read_text().split("\n![")[0]
    text = "\n".join(line for line in text.splitlines() if not line.startswith("Runs: "))
    arms = json.loads((path.parent / "summary.json").read_text())
    urls = run_urls(tracking_uri, [r for arm in arms.values() for r in arm["runs"]])
    _, opened = _where(tracking_uri)
    lines = [text.rstrip(), "", "## MLflow runs", "", f"Open with {opened}.", ""]
    for name, arm in arms.items():
        lines.append(f"- {name}: " + ", ".join(f"[{r}]({urls[r]})" for r in arm["runs"]))
    lines += ["", f"Report and figures: `{path.resolve().parent}`", ""]
    return "\n".join(lines)


def validation_rows(result: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per expectation of a Great Expectations result (its JSON form, as
    :func:`slca.data.validate.run_suite` returns it): what it checks, on which columns
    or rows, ``pass``/``fail``/``error`` and the count behind it."""
    rows = []
    for found in result.get("results", []):
        config = found["expectation_config"]
        kwargs = config.get("kwargs") or {}
        outcome = found.get("result") or {}
        info = found.get("exception_info") or {}
        raised = bool(info) and info.get("raised_exception") is not False
        columns = [kwargs[k] for k in ("column", "column_A", "column_B") if k in kwargs]
        condition = kwargs.get("row_condition")
        if isinstance(condition, Mapping):
            condition = condition.get("pass_through_filter")
        if outcome.get("unexpected_count") is not None:
            detail = f"{outcome['unexpected_count']} of {outcome.get('element_count')} fail"
        elif outcome.get("observed_value") is not None:
            detail = f"observed {outcome['observed_value']}"
        else:
            detail = ""
        rows.append(
            {
                "expectation": config.get("type", "?"),
                "on": ", ".join(map(str, columns))
                or (f"rows {condition}" if condition else "table"),
                "result": "pass" if found.get("success") else "error" if raised else "fail",
                "detail": detail,
            }
        )
    return rows


def _publish(step: str, create: Callable[[], Any]) -> None:
    try:
        create()
    except Exception as e:  # the step's outputs stand; only its summary on the page is lost
        get_run_logger().warning(f"{step}: Prefect artifact not published: {e}")


def publish_validation(result: Mapping[str, Any], in_dir: str, report_dir: str | None) -> None:
    """The ``slca-validation`` table of a validation of ``in_dir``."""
    rows = validation_rows(result)
    met = sum(row["result"] == "pass" for row in rows)
    where = f"; report: {report_dir}" if report_dir else ""
    description = f"task data {in_dir}: {met} of {len(rows)} expectations met{where}"
    _publish(
        "validate",
        lambda: create_table_artifact(rows, key=VALIDATION_KEY, description=description),
    )


def publish_comparison(report_path: str | Path, tracking_dir: str) -> None:
    """The ``slca-comparison`` markdown of the report at ``report_path`` on the runs of
    the store at ``tracking_dir`` (or ``MLFLOW_TRACKING_URI``)."""
    tracking_uri = resolve_uri(tracking_dir)
    _publish(
        "report",
        lambda: create_markdown_artifact(
            comparison_markdown(report_path, tracking_uri),
            key=COMPARISON_KEY,
            description=f"comparison report {report_path}",
        ),
    )


def publish_training_run(estimator: str, run_id: str, tracking_dir: str) -> None:
    """The ``slca-train-<estimator>`` link to the RL stage's MLflow run in the store at
    ``tracking_dir`` (or ``MLFLOW_TRACKING_URI``)."""
    tracking_uri = resolve_uri(tracking_dir)
    _publish(
        "train",
        lambda: create_link_artifact(
            run_urls(tracking_uri, [run_id])[run_id],
            link_text=f"MLflow run {run_id} ({estimator})",
            key=training_key(estimator),
            description=f"the {estimator} RL run; open with {_where(tracking_uri)[1]}",
        ),
    )
