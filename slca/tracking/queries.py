"""Reading runs back: metric histories, learning-curve CSVs, finished runs of an
experiment, and a run's completed checkpoints."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from slca.atomic import atomic_write_text
from slca.tracking.store import DEFAULT_DIRECTORY, completed_dirs, ensure_store, resolve_uri


def metric_history(
    run_id: str, key: str, *, tracking_uri: str | None = None
) -> list[tuple[int, float]]:
    """``[(step, value), …]`` of one metric of one run, ordered by step (then time)."""
    client = MlflowClient(tracking_uri=tracking_uri)
    history = client.get_metric_history(run_id, key)
    return [(m.step, m.value) for m in sorted(history, key=lambda m: (m.step, m.timestamp))]


#: The per-step metrics a learning-curve file holds (see :func:`write_curves`).
CURVE_METRICS = (
    "reward/total",
    "reward/tool",
    "reward/sum",
    "adv/zero_group_frac",
    "rollout/tool_calls_per_task",
    "rollout/redundant_calls",
    "actor/kl",
    "val/success_at_0.9",
    "val/redundant_calls_per_task",
)


def write_curves(
    run_id: str,
    path: str | os.PathLike[str],
    *,
    keys: Sequence[str] = CURVE_METRICS,
    tracking_uri: str | None = None,
) -> Path:
    """Write a run's per-step metrics as CSV (one row per step, one column per key;
    empty where a step has no value), written then renamed."""
    by_step: dict[int, dict[str, float]] = {}
    for key in keys:
        for step, value in metric_history(run_id, key, tracking_uri=tracking_uri):
            by_step.setdefault(step, {})[key] = value
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(["step", *keys])
    for step in sorted(by_step):
        writer.writerow([step, *(by_step[step].get(k, "") for k in keys)])
    return atomic_write_text(path, table.getvalue())


@dataclass(frozen=True)
class RunRecord:
    """What a report needs of one finished run: its params, last metric values and
    learning curves."""

    run_id: str
    name: str
    start_time: int
    params: dict[str, str]
    metrics: dict[str, float]
    curves: dict[str, list[tuple[int, float]]]


def experiment_runs(
    directory: str | os.PathLike[str] = DEFAULT_DIRECTORY,
    *,
    experiment: str = "slca",
    curve_keys: Sequence[str] = CURVE_METRICS,
    tracking_uri: str | None = None,
) -> list[RunRecord]:
    """Every FINISHED run of ``experiment``, oldest first (an empty list when the
    experiment does not exist)."""
    uri = resolve_uri(directory, tracking_uri)
    ensure_store(uri)
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    runs = client.search_runs(
        [found.experiment_id], filter_string="attributes.status = 'FINISHED'", max_results=5000
    )
    out = []
    for run in sorted(runs, key=lambda r: r.info.start_time):
        curves = {
            key: metric_history(run.info.run_id, key, tracking_uri=uri)
            for key in curve_keys
            if key in run.data.metrics
        }
        out.append(
            RunRecord(
                run_id=run.info.run_id,
                name=run.info.run_name or run.info.run_id,
                start_time=run.info.start_time,
                params=dict(run.data.params),
                metrics=dict(run.data.metrics),
                curves=curves,
            )
        )
    return out


def logged_checkpoints(run_id: str, *, tracking_uri: str | None = None) -> dict[int, str]:
    """Step → artifact path (``checkpoints/step_<k>``) of every checkpoint of a run whose
    upload completed: its folder holds the completion marker. A folder without it is an
    upload cut short (a crash) and is left out; slca reads checkpoints from MLflow only
    through this."""
    client = MlflowClient(tracking_uri=tracking_uri)
    found = {}
    for path in completed_dirs(client, run_id, "checkpoints"):
        name = os.path.basename(path)
        if name.startswith("step_") and name[5:].isdigit():
            found[int(name[5:])] = path
    return dict(sorted(found.items()))


def evaluation_lines(
    run_id: str, *, tracking_uri: str | None = None
) -> list[dict[str, Any]] | None:
    """The per-task lines (``eval/*.tasks.jsonl``) an evaluation logged into a run, every
    set's in one list; None when the run has none (an evaluation from before they were
    logged, or a run never evaluated)."""
    import tempfile

    client = MlflowClient(tracking_uri=tracking_uri)
    files = [
        a.path for a in client.list_artifacts(run_id, "eval") if a.path.endswith(".tasks.jsonl")
    ]
    if not files:
        return None
    lines: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for path in sorted(files):
            local = Path(client.download_artifacts(run_id, path, scratch))
            lines += [json.loads(row) for row in local.read_text().splitlines() if row.strip()]
    return lines
