"""The run writer: one :class:`Tracker` records one run (params, metrics, histograms,
checkpoints, the final model)."""

from __future__ import annotations

import math
import os
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import mlflow
import yaml
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from slca.locks import ExclusiveLock
from slca.processes import stop_signals_wait, stopped_from_outside
from slca.tracking.additions import add_to_run as _add_to_run
from slca.tracking.figures import write_histograms
from slca.tracking.params import param_value, plain, run_params
from slca.tracking.params import step_number as _step
from slca.tracking.provenance import cpu_kernels, git_commit
from slca.tracking.queries import metric_history
from slca.tracking.store import (
    DEFAULT_DIRECTORY,
    WRITER_LOCK,
    WholeCalls,
    completed_dirs,
    delete_partial,
    ensure_store,
    log_text,
    resolve_uri,
    sqlite_path,
    upload_complete,
)

CONFIG_ARTIFACT = "config/resolved.yaml"
NONFINITE_METRIC = "tracking/nonfinite_metrics"
STATUSES = ("FINISHED", "FAILED", "KILLED")
_BATCH = 100  # MLflow accepts at most 100 params/tags per batch (1000 metrics)


class Tracker:
    """Records one training run in MLflow; a context manager that ends the run.

    >>> with Tracker("mlflow", experiment="slca") as tracker:     # doctest: +SKIP
    ...     tracker.start(run_name="slca-tiny")
    ...     tracker.log_params(config, data_hashes={"tasks": "md5:…"})
    ...     tracker.log_metrics({"reward/tool": 0.4}, step=1)

    Leaving the ``with`` block ends the run: ``FINISHED``, or ``FAILED`` on an
    exception, or ``KILLED`` when stopped from outside: ``KeyboardInterrupt`` (Ctrl-C,
    and SIGTERM under :func:`slca.processes.end_like_ctrl_c`) or another
    ``BaseException`` that is no error (Prefect's ``TerminationSignal``, which a
    worker's SIGTERM raises in a cancelled flow run). ``start`` sets MLflow's
    process-wide tracking URI and active run (``mlflow.transformers.log_model`` logs to
    the active run), so one Tracker runs at a time per process.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] = DEFAULT_DIRECTORY,
        *,
        experiment: str = "slca",
        tracking_uri: str | None = None,
        system_metrics_s: float | None = None,
    ) -> None:
        from slca.tracking.registry import policy_model_name

        self.registered_model = policy_model_name(experiment)  # refused now, not after training
        self.directory = Path(directory).resolve()
        self.system_metrics_s = system_metrics_s  # seconds between system/* samples; None: off
        self._monitor: Any = None
        self._pending: list[Metric] = []
        self.tracking_uri = resolve_uri(self.directory, tracking_uri)
        self.experiment_name = experiment
        db = sqlite_path(self.tracking_uri)
        self._writer: ExclusiveLock | None = None
        if db is not None:
            db.parent.mkdir(parents=True, exist_ok=True)
            self.artifact_location: str | None = (db.parent / "artifacts").as_uri()
            self._writer = ExclusiveLock(db.parent / WRITER_LOCK, what=f"MLflow store {db}")
        else:  # a tracking server serialises its writers itself
            self.artifact_location = None
        ensure_store(self.tracking_uri)  # a client creates (migrates) the store at once
        self.client = WholeCalls(MlflowClient(tracking_uri=self.tracking_uri))
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.resumed = False
        self.last_steps: dict[str, int] = {}
        """Per metric key, the last step logged (read back from the store on resume)."""
        self.nonfinite_dropped: Counter[str] = Counter()
        """Per metric key, how many non-finite values this process dropped."""
        self.skipped: Counter[str] = Counter()
        """Per metric key, how many (key, step) pairs were skipped as already logged."""
        self._complete: set[str] = set()
        self._user_env_uri: str | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def lock(self) -> Tracker:
        """Take the store's writer lock now (``start`` takes it otherwise), so a second
        writer is refused before any expensive work; released by :meth:`end` (or on
        leaving the ``with`` block when no run started)."""
        if self._writer is not None:
            self._writer.acquire()
        return self

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.run_id is None:
            if self._writer is not None:
                self._writer.release()
            return
        if exc_type is None:
            self.end("FINISHED")
        else:
            self.end("KILLED" if stopped_from_outside(exc) else "FAILED")

    def ensure_experiment(self) -> str:
        """The id of this tracker's experiment, created (with the store's artifact
        location) when missing; a deleted one is refused."""
        experiment = self.client.get_experiment_by_name(self.experiment_name)
        if experiment is None:
            return self.client.create_experiment(
                self.experiment_name, artifact_location=self.artifact_location
            )
        if experiment.lifecycle_stage != "active":
            raise ValueError(
                f"experiment {self.experiment_name!r} is deleted in {self.tracking_uri}; "
                "restore it (mlflow experiments restore) or choose another name"
            )
        return experiment.experiment_id

    def start(
        self,
        run_name: str | None = None,
        resume_run_id: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Tracker:
        """Start a new run, or continue run ``resume_run_id`` (the same run id).

        On resume the last logged step of every metric and the completed artifact
        directories are read back, so that nothing is logged twice. ``tags`` are set on
        a new run; a resumed run must carry the same values (a run identity, e.g. the
        config fingerprint), else nothing is written and a ``ValueError`` names both.

        On the default SQLite store the run holds the store's writer lock until
        :meth:`end`: a second writer is refused at once, naming this one's PID.
        """
        if self.run_id is not None:
            raise RuntimeError(f"run {self.run_id} is already started; end() it first")
        if mlflow.active_run() is not None:
            raise RuntimeError(
                f"another MLflow run ({mlflow.active_run().info.run_id}) is active in this "
                "process; end it first"
            )
        if self._writer is not None:
            self._writer.acquire()  # refused at once while another process writes
        try:
            return self._start(run_name, resume_run_id, tags)
        except BaseException:
            if self._writer is not None:
                self._writer.release()
            raise

    def _start(
        self, run_name: str | None, resume_run_id: str | None, tags: Mapping[str, str] | None
    ) -> Tracker:
        self.experiment_id = self.ensure_experiment()
        # mlflow.set_tracking_uri also exports MLFLOW_TRACKING_URI; remember the user's
        # value so end() can put it back and a later Tracker honours its own directory.
        self._user_env_uri = os.environ.get("MLFLOW_TRACKING_URI")
        mlflow.set_tracking_uri(self.tracking_uri)
        if resume_run_id is not None:
            try:
                previous = self.client.get_run(resume_run_id)
            except MlflowException as exc:
                raise ValueError(
                    f"cannot resume run {resume_run_id!r}: not found in {self.tracking_uri}"
                ) from exc
            if previous.info.experiment_id != self.experiment_id:
                raise ValueError(
                    f"cannot resume run {resume_run_id!r}: it belongs to experiment "
                    f"{previous.info.experiment_id}, not {self.experiment_name!r} "
                    f"({self.experiment_id})"
                )
            differing = {
                k: (previous.data.tags.get(k), v)
                for k, v in (tags or {}).items()
                if previous.data.tags.get(k) != v
            }
            if differing:
                said = ", ".join(
                    f"{k}: run has {a!r}, this one {b!r}" for k, (a, b) in differing.items()
                )
                raise ValueError(f"cannot resume run {resume_run_id!r}: another run ({said})")
            with stop_signals_wait():
                run = mlflow.start_run(run_id=resume_run_id, log_system_metrics=False)
            self.run_id = run.info.run_id
            self.resumed = True
            for key in previous.data.metrics:
                steps = [m.step for m in self.client.get_metric_history(self.run_id, key)]
                if steps:
                    self.last_steps[key] = max(steps)
            self._complete = self._completed_artifact_dirs()
            count = int(previous.data.tags.get("slca.resume_count", "0")) + 1
            self.client.set_tag(self.run_id, "slca.resume_count", str(count))
        else:
            with stop_signals_wait():
                run = mlflow.start_run(
                    experiment_id=self.experiment_id,
                    run_name=run_name,
                    tags=dict(tags or {}),
                    log_system_metrics=False,  # slca's interval, below, not the environment's
                )
            self.run_id = run.info.run_id
        if self.system_metrics_s is not None:
            from slca.tracking.system import start_monitor

            self._monitor = start_monitor(self, self.system_metrics_s)
        return self

    def end(self, status: str = "FINISHED") -> None:
        """End the run with ``status`` (``FINISHED``, ``FAILED`` or ``KILLED``)."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        if self.run_id is None:
            return
        active = mlflow.active_run()
        try:  # the deferred metrics, the monitor's last samples, then the end, whatever fails
            self.flush()
            if self._monitor is not None:
                self._monitor.finish()
        finally:
            self._monitor = None
            try:
                if active is not None and active.info.run_id == self.run_id:
                    with stop_signals_wait():
                        mlflow.end_run(status)
                else:
                    self.client.set_terminated(self.run_id, status)
            finally:
                self.run_id = None
                if self._writer is not None:
                    self._writer.release()
        if self._user_env_uri is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = self._user_env_uri

    def _require_run(self) -> str:
        if self.run_id is None:
            raise RuntimeError("no run started: call Tracker.start() first")
        return self.run_id

    # -- params ------------------------------------------------------------------------

    def log_params(
        self,
        config: Mapping[str, Any],
        *,
        data_hashes: Mapping[str, str] | None = None,
        git_dir: str | os.PathLike[str] | None = None,
    ) -> dict[str, str]:
        """Log the resolved config (flattened, dotted keys), the git commit and data hashes.

        Params: every config leaf (values over 6000 characters truncated), ``git.commit``
        (``unknown`` outside a checkout), ``git.dirty``, ``data_hash.<name>``. Tags:
        ``mlflow.source.git.commit`` and ``data_hash.<name>``. Artifact: the whole
        config as ``config/resolved.yaml``. On resume, params already logged with the
        same value are skipped; a changed value cannot be overwritten in MLflow, so it
        is warned about, listed in the tag ``slca.params_changed_on_resume`` and the new
        config is stored as ``config/resolved.resume-<n>.yaml``.

        Returns the params as logged (strings).
        """
        run_id = self._require_run()
        commit, dirty = git_commit(git_dir)
        hashes = {str(k): str(v) for k, v in (data_hashes or {}).items()}
        params = run_params(config, commit=commit, dirty=dirty, hashes=hashes)
        existing = self.client.get_run(run_id).data.params
        changed = sorted(k for k, v in params.items() if k in existing and existing[k] != v)
        new = {k: v for k, v in params.items() if k not in existing}
        tags = {"mlflow.source.git.commit": commit, "slca.cpu_kernels": cpu_kernels()}
        tags.update({f"data_hash.{k}": param_value(v) for k, v in hashes.items()})
        config_artifact = CONFIG_ARTIFACT
        if changed:
            resume_count = self.client.get_run(run_id).data.tags.get("slca.resume_count", "0")
            config_artifact = f"config/resolved.resume-{resume_count}.yaml"
            tags["slca.params_changed_on_resume"] = param_value(", ".join(changed))
            warnings.warn(
                f"run {run_id}: params changed since the run started and are kept at their "
                f"first value in MLflow (new config in {config_artifact}): {', '.join(changed)}",
                stacklevel=2,
            )
        items = sorted(new.items())
        for i in range(0, len(items), _BATCH):
            self.client.log_batch(run_id, params=[Param(k, v) for k, v in items[i : i + _BATCH]])
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        if not existing or changed:
            log_text(
                self.client,
                run_id,
                yaml.safe_dump(plain(config), sort_keys=False, allow_unicode=True),
                config_artifact,
            )
        return params

    # -- metrics -----------------------------------------------------------------------

    def log_metrics(
        self, metrics: Mapping[str, Any], step: int, *, defer: bool = False
    ) -> dict[str, float]:
        """Log ``metrics`` at ``step``; returns what was actually logged.

        Non-finite values are dropped and counted (``nonfinite_dropped`` and the metric
        ``tracking/nonfinite_metrics``). A (key, step) pair at or below the last step
        logged for that key is skipped (counted in ``skipped``): after a resume, the
        steps replayed since the last checkpoint do not log twice. ``defer``: kept until
        :meth:`flush` (or the run's end), so that many short steps cost one write.
        """
        self._require_run()
        step = _step(step)
        logged: dict[str, float] = {}
        nonfinite = 0
        for key, raw in metrics.items():
            try:
                value = float(raw)
            except (TypeError, ValueError):
                raise TypeError(f"metric {key!r}: expected a number, got {raw!r}") from None
            if not math.isfinite(value):
                self.nonfinite_dropped[key] += 1
                nonfinite += 1
                continue
            logged[key] = value
        if nonfinite:
            logged[NONFINITE_METRIC] = float(nonfinite)
        for key in list(logged):
            last = self.last_steps.get(key)
            if last is not None and step <= last:
                self.skipped[key] += 1
                del logged[key]
        if not logged:
            return logged
        now = int(time.time() * 1000)
        self._pending += [Metric(k, v, now, step) for k, v in logged.items()]
        if not defer:
            self.flush()
        for key in logged:
            self.last_steps[key] = step
        return logged

    def flush(self) -> None:
        """Write the metrics :meth:`log_metrics` deferred."""
        pending, self._pending = self._pending, []
        for i in range(0, len(pending), 1000):
            self.client.log_batch(self._require_run(), metrics=pending[i : i + 1000])

    def history(self, key: str) -> list[tuple[int, float]]:
        """``[(step, value), …]`` of a metric of this run."""
        return metric_history(self._require_run(), key, tracking_uri=self.tracking_uri)

    # -- artifacts ---------------------------------------------------------------------

    def _completed_artifact_dirs(self) -> set[str]:
        return {
            path
            for root in ("histograms", "checkpoints")
            for path in completed_dirs(self.client, self.run_id, root)
        }

    def _upload(self, source: Path, artifact_path: str) -> None:
        """Upload with a completion marker; on resume, what an earlier, cut-short upload
        left at ``artifact_path`` is deleted first (see :func:`upload_complete`)."""
        run_id = self._require_run()
        if self.resumed and artifact_path not in self._complete:
            delete_partial(self.artifact_uri(), artifact_path)
        upload_complete(self.client, run_id, source, artifact_path)
        self._complete.add(artifact_path)

    def log_histograms(self, step: int, values: Mapping[str, Any], *, bins: int = 50) -> str | None:
        """Histogram figures of per-segment values (e.g. advantages), plus the raw arrays.

        ``values`` maps a segment name (``tool``, ``summary``, …) to an array of any
        shape (flattened). Writes ``histograms/step_<k>/<segment>.png`` per segment and
        ``histograms/step_<k>/values.npz`` holding every array under its segment name
        (``np.load(...)[segment]``); non-finite values are kept in the npz and left out
        of the figure. Returns the artifact path, or ``None`` when that step's
        histograms were already logged.
        """
        self._require_run()
        step = _step(step)
        artifact_path = f"histograms/step_{step}"
        if artifact_path in self._complete:
            return None
        with tempfile.TemporaryDirectory() as tmp:
            write_histograms(values, f"step {step}", bins, Path(tmp))
            self._upload(Path(tmp), artifact_path)
        return artifact_path

    def log_checkpoint(self, path: str | os.PathLike[str], step: int) -> str | None:
        """Upload a checkpoint (directory or file) to ``checkpoints/step_<k>``.

        Returns the artifact path, or ``None`` when that step was already uploaded.
        """
        self._require_run()
        step = _step(step)
        source = Path(path)
        if not source.exists():
            raise FileNotFoundError(f"checkpoint {source} does not exist")
        artifact_path = f"checkpoints/step_{step}"
        if artifact_path in self._complete:
            return None
        self._upload(source, artifact_path)
        return artifact_path

    def log_datasets(self, inputs: Sequence[Any]) -> None:
        """The task data the run read, as MLflow dataset inputs (one per
        :class:`~slca.tracking.datasets.SplitInput`); MLflow keeps one of each.

        Runs started together on one store (the credit lab's arms) log the same dataset
        at once, and MLflow looks it up, then inserts it: the second insert breaks the
        store's unique key. Logged again, it finds the dataset the other run inserted."""
        from slca.tracking.datasets import dataset_inputs

        run_id, datasets = self._require_run(), dataset_inputs(inputs)
        for attempt in range(3):
            try:
                self.client.log_inputs(run_id, datasets=datasets)
                return
            except MlflowException as exc:
                if attempt == 2 or not _lost_insert_race(exc):
                    raise
                time.sleep(0.2 * (attempt + 1))

    def artifact_uri(self, artifact_path: str = "") -> str:
        """The URI of an artifact of this run (a ``file://`` path on the default store)."""
        run = self.client.get_run(self._require_run())
        base = run.info.artifact_uri.rstrip("/")
        return f"{base}/{artifact_path}" if artifact_path else base

    # Adding to a run that is not this tracker's own (evaluation results into the run
    # that trained the model): slca.tracking.additions.add_to_run, bound as a method.
    add_to_run = _add_to_run

    # -- model -------------------------------------------------------------------------

    def log_model(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "model",
        task: str = "text-generation",
        pip_requirements: list[str] | None = None,
        register: bool = True,
        step: int | None = None,
    ) -> str:
        """Log a transformers model and tokenizer with ``mlflow.transformers`` and, with
        ``register``, make it a version of ``registered_model`` (``<experiment>-policy``,
        :func:`slca.tracking.registry.register_version`); once per run and ``name``.
        ``pip_requirements`` defaults to :func:`default_pip_requirements` (explicit, so
        MLflow does not infer them by importing the model). Returns the model URI
        (``models:/<model id>``), loadable with ``mlflow.transformers.load_model``."""
        from slca.tracking.models import log_model

        return log_model(
            self,
            model,
            tokenizer,
            name=name,
            task=task,
            pip_requirements=pip_requirements,
            register=register,
            step=None if step is None else _step(step),
        )


def _lost_insert_race(exc: MlflowException) -> bool:
    """A unique key broken by a row another writer inserted first (SQLite's and
    PostgreSQL's/MySQL's wording), not a bad value."""
    message = str(exc)
    return any(
        m in message for m in ("UNIQUE constraint failed", "duplicate key", "Duplicate entry")
    )
