"""Evaluation results into MLflow: into the run that trained the evaluated model, or a
run of their own."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from slca.tracking.writer import Tracker


def log_evaluation(
    directory: str | os.PathLike[str],
    *,
    experiment: str,
    metrics: Mapping[str, float],
    reports: Sequence[str | os.PathLike[str]],
    run_id: str | None = None,
    run_name: str | None = None,
    tracking_uri: str | None = None,
) -> str:
    """Log evaluation metrics (at step 0) and the report files (under ``eval/``) into
    ``run_id`` — the run that trained the evaluated model — or, without one, into a
    new run named ``run_name``. Returns the run id."""
    if run_id is None:
        with Tracker(directory, experiment=experiment, tracking_uri=tracking_uri) as tracker:
            tracker.start(run_name=run_name)
            tracker.client.set_tag(tracker.run_id, "slca.kind", "eval")
            tracker.log_metrics(metrics, step=0)
            for report in reports:
                tracker.client.log_artifact(tracker.run_id, str(report), "eval")
            return tracker.run_id
    Tracker(directory, experiment=experiment, tracking_uri=tracking_uri).add_to_run(
        run_id, metrics, reports, artifact_path="eval"
    )
    return run_id
