"""Adding to a run that is not the tracker's own (see :meth:`slca.tracking.Tracker.add_to_run`):
evaluation results into the run that trained the model, a report's figure into a
finished run."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from mlflow.entities import Metric
from mlflow.exceptions import MlflowException

from slca.tracking.params import step_number


def add_to_run(
    tracker: Any,
    run_id: str,
    metrics: Mapping[str, Any],
    files: Sequence[str | os.PathLike[str]] = (),
    *,
    step: int = 0,
    artifact_path: str | None = None,
    datasets: Sequence[Any] = (),
    system: Sequence[Mapping[str, float]] = (),
    tables: Mapping[str, Mapping[str, Sequence[Any]]] | None = None,
) -> None:
    """Add metrics (at ``step``; non-finite ones dropped), files (under
    ``artifact_path``), dataset inputs (:class:`~slca.tracking.datasets.SplitInput`),
    system-metric samples (after the run's own steps) and tables (artifact file →
    columns, ``log_table``) to an existing run of ``tracker``'s experiment, not the
    tracker's own — e.g. evaluation results into the run that trained the model —
    holding the store's writer lock. A run missing or of another experiment is refused
    (``ValueError``) before anything is written. ``Tracker.add_to_run`` is this function."""
    writer = tracker._writer
    # one writer per store; a hold the caller took (to write more after) stays its own
    with contextlib.nullcontext() if writer is None or writer.held else writer:
        try:
            run = tracker.client.get_run(run_id)
        except MlflowException as exc:
            raise ValueError(f"run {run_id!r} not found in {tracker.tracking_uri}") from exc
        if run.info.experiment_id != tracker.ensure_experiment():
            raise ValueError(f"run {run_id!r} is not in experiment {tracker.experiment_name!r}")
        now = int(time.time() * 1000)
        finite = {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}
        entries = [Metric(k, v, now, step_number(step)) for k, v in finite.items()]
        if system:
            from slca.tracking.system import sample_metrics

            entries += sample_metrics(run, system, now)
        for i in range(0, len(entries), 1000):
            tracker.client.log_batch(run_id, metrics=entries[i : i + 1000])
        if datasets:
            from slca.tracking.datasets import dataset_inputs

            tracker.client.log_inputs(run_id, datasets=dataset_inputs(datasets))
        for path in files:
            tracker.client.log_artifact(run_id, str(path), artifact_path)
        for table_file, columns in (tables or {}).items():
            tracker.client.log_table(run_id, dict(columns), table_file)
