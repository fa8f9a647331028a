"""Evaluation results into MLflow: into the run that trained the evaluated model, or a
run of their own."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from slca.tracking.writer import Tracker

_log = logging.getLogger(__name__)


def log_evaluation(
    directory: str | os.PathLike[str],
    *,
    experiment: str,
    metrics: Mapping[str, float],
    reports: Sequence[str | os.PathLike[str]],
    run_id: str | None = None,
    run_name: str | None = None,
    tracking_uri: str | None = None,
    datasets: Sequence[Any] = (),
    system: Sequence[Mapping[str, float]] = (),
    tables: Mapping[str, Mapping[str, Sequence[Any]]] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
) -> str:
    """Log evaluation metrics (at step 0), the report files (under ``eval/``) and the
    task data read (``datasets``: :class:`~slca.tracking.datasets.SplitInput`) and the
    system-metric samples taken meanwhile (``system``) and the per-task ``tables``
    (artifact file → columns, shown by the UI's evaluation view) into
    ``run_id`` — the run that trained the evaluated model — or, without one, into a
    new run named ``run_name``. With ``model_dir`` (the evaluated model), its registered
    version gets the figures and the registry's aliases move
    (:func:`slca.tracking.registry.record_evaluation`) under the same hold of the store's
    writer lock. Returns the run id."""
    from slca.tracking.registry import record_evaluation

    figures = {k.removeprefix("eval/"): v for k, v in metrics.items()}
    if run_id is not None and not _in_store(directory, experiment, tracking_uri, run_id):
        # A model trained against another store (copied, or evaluated with another
        # tracking_dir): its figures get a run of their own here, not an error at the end.
        _log.warning(
            "the run %s that trained the model is not in %s: its evaluation is logged as "
            "a new run %r",
            run_id,
            directory,
            run_name,
        )
        run_id = None
    if run_id is None:
        with Tracker(directory, experiment=experiment, tracking_uri=tracking_uri) as tracker:
            tracker.start(run_name=run_name)
            tracker.client.set_tag(tracker.run_id, "slca.kind", "eval")
            tracker.log_metrics(metrics, step=0)
            if datasets:
                tracker.log_datasets(datasets)
            for i, sample in enumerate(system):
                tracker.log_metrics(sample, step=i)
            for table_file, columns in (tables or {}).items():
                tracker.client.log_table(tracker.run_id, dict(columns), table_file)
            for report in reports:
                tracker.client.log_artifact(tracker.run_id, str(report), "eval")
            if model_dir is not None:
                record_evaluation(tracker, model_dir, figures)
            return tracker.run_id
    with Tracker(directory, experiment=experiment, tracking_uri=tracking_uri).lock() as tracker:
        tracker.add_to_run(
            run_id,
            metrics,
            reports,
            artifact_path="eval",
            datasets=datasets,
            system=system,
            tables=tables,
        )
        if model_dir is not None:
            record_evaluation(tracker, model_dir, figures)
    return run_id


def _in_store(
    directory: str | os.PathLike[str], experiment: str, tracking_uri: str | None, run_id: str
) -> bool:
    """Whether ``run_id`` is a run of ``experiment`` in the store at ``directory``."""
    from mlflow.exceptions import MlflowException

    tracker = Tracker(directory, experiment=experiment, tracking_uri=tracking_uri)
    try:
        run = tracker.client.get_run(run_id)
    except MlflowException:
        return False
    found = tracker.client.get_experiment_by_name(experiment)
    return found is not None and run.info.experiment_id == found.experiment_id
