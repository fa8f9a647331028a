"""The MLflow run of a stage that trains on fixed examples (``sft``, ``pretrain``): its
section as params, the data it read, per-step figures, the final model (registered),
and a run file in the model it wrote. Nothing when the section's ``tracking_dir`` is
null."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

FLUSH_S = 30.0
"""Seconds between two writes of a stage run's per-step metrics (a write costs tens of
ms on a busy SQLite store; an SFT step on the demo's CPU about 0.5 s)."""


class StageRun:
    """``section``'s MLflow run, or nothing when ``tracker`` is None. ``params`` is the
    section's settings: its ``run_name`` and ``experiment`` name the run."""

    def __init__(self, section: str, params: Any, tracker: Any) -> None:
        self.section, self.params, self.tracker = section, params, tracker
        self.flushed = 0.0

    def begin(
        self, data_hashes: dict[str, str], splits: Sequence[tuple[str, str, str | None]]
    ) -> None:
        """Open the run: the section as ``<section>.*`` params, the data hashes, and the
        splits read (``(task directory, split, content hash or None)``) as its datasets."""
        if self.tracker is None:
            return
        from slca.tracking import split_input

        self.tracker.start(run_name=self.params.run_name, tags={"slca.kind": self.section})
        settings = {self.section: self.params.model_dump(mode="json")}
        self.tracker.log_params(settings, data_hashes=data_hashes)
        self.tracker.log_datasets([split_input(*split) for split in splits])

    def step(self, step: int, figures: dict[str, float]) -> None:
        """One step's figures (``sft/<name>`` from :func:`slca.training.sft.sft`, logged
        as ``<section>/<name>``), written every :data:`FLUSH_S` seconds."""
        if self.tracker is None:
            return
        named = {f"{self.section}/{key.split('/', 1)[-1]}": v for key, v in figures.items()}
        self.tracker.log_metrics(named, step=step, defer=True)
        if time.monotonic() - self.flushed >= FLUSH_S:
            self.tracker.flush()
            self.flushed = time.monotonic()

    def finish(self, model: Any, tokenizer: Any, figures: dict[str, float], steps: int) -> None:
        """The stage's figures at its last step, and the final model."""
        if self.tracker is None:
            return
        self.tracker.log_metrics(figures, step=steps)
        self.tracker.log_model(model, tokenizer)

    def write_run_file(self, directory: Path) -> None:
        """``mlflow_run.json`` in the written model: the run, for its evaluation."""
        if self.tracker is None:
            return
        from slca.tracking import RUN_FILE

        run = {"run_id": self.tracker.run_id, "experiment": self.params.experiment}
        (directory / RUN_FILE).write_text(
            json.dumps({**run, "stage": self.section}, indent=2) + "\n"
        )


@contextlib.contextmanager
def stage_run(section: str, params: Any) -> Iterator[StageRun]:
    """The run of ``section`` with settings ``params`` (ended FINISHED, or FAILED/KILLED
    with the exception); the store's writer lock is taken at once, so a second writer
    is refused before any work."""
    if params.tracking_dir is None:
        yield StageRun(section, params, None)
        return
    with locked_tracker(params, section) as tracker:
        yield StageRun(section, params, tracker)


@contextlib.contextmanager
def locked_tracker(settings: Any, section: str) -> Iterator[Any]:
    """The :class:`~slca.tracking.Tracker` of a section's ``tracking_dir``,
    ``experiment`` and ``system_metrics_s``, its store's writer lock taken now (a second
    writer is refused before any expensive work); faults opening the store name
    ``<section>.tracking_dir``. Leaving the block ends its run, if one started."""
    from slca.faults import naming_the_place
    from slca.tracking import Tracker

    with naming_the_place(settings.tracking_dir, f"{section}.tracking_dir"):
        tracker = Tracker(
            settings.tracking_dir,
            experiment=settings.experiment,
            system_metrics_s=settings.system_metrics_s,
        ).lock()
    with tracker:
        yield tracker
