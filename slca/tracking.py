"""Experiment tracking with MLflow: the only module of ``slca`` that imports MLflow.

One :class:`Tracker` records one training run: the resolved config, git commit and
data hashes as params; per-step metrics; segment-advantage histograms (figures plus
the raw arrays); checkpoints; the final model (``mlflow.transformers``). A crashed
run is resumed by passing its run id to :meth:`Tracker.start`: the same MLflow run
continues and nothing is logged twice.

Store
    By default a SQLite store ``sqlite:///<directory>/mlflow.db`` with artifacts in
    ``<directory>/artifacts`` (``directory`` defaults to ``./mlflow``); browse it with
    ``mlflow ui --backend-store-uri sqlite:///mlflow/mlflow.db``. MLflow's ``./mlruns``
    file store is in maintenance mode and duplicated metric history when a model was
    logged, so it is not used. ``tracking_uri=`` (or ``MLFLOW_TRACKING_URI``) points at
    another store, e.g. a tracking server. ``MLFLOW_DISABLE_TELEMETRY`` defaults to
    ``true`` before MLflow is first imported.

Metrics (DESIGN §8), logged each step with the step number; the trainer produces
them and the tracker logs whatever it is given:

=================================  ==========================================
``reward/tool``                    mean R_tool (process/execution reward)
``reward/sum``                     mean R_sum (preference reward)
``reward/total``                   mean combined reward
``adv/tool_mean``, ``adv/tool_std``  token-level advantage on tool tokens
``adv/sum_mean``, ``adv/sum_std``  token-level advantage on summary tokens
``adv/zero_group_frac``            share of groups with no learning signal
``actor/pg_loss``                  clipped surrogate loss
``actor/kl``                       k3 KL to the reference policy
``actor/clipfrac``                 share of tokens whose ratio was clipped
``actor/entropy``                  mean token entropy
``actor/grad_norm``                gradient norm before clipping
``rollout/tool_calls_per_task``    calls per rollout
``rollout/redundant_calls``        duplicate / unneeded calls per rollout
``sim/invalid_rate``               simulator responses replaced by errors
``perf/tokens_per_s``              throughput of the step
``perf/step_s``                    wall time of the step
``perf/<phase>_s``                 time of each phase (``slca.training.rl.PHASES``)
``judge/calls``, ``judge/failures`` the judge's counters (with that scorer)
``tracking/nonfinite_metrics``     values dropped at this step (NaN/inf)
=================================  ==========================================

The last one is the tracker's own: a non-finite value is never logged; how many
were dropped at a step is (only at steps where some were).

Artifacts
    ``config/resolved.yaml``            the full resolved config (params are truncated
                                        at MLflow's 6000-character limit)
    ``histograms/step_<k>/<seg>.png``   one histogram figure per segment
    ``histograms/step_<k>/values.npz``  the raw arrays, one per segment, to re-plot
    ``checkpoints/step_<k>/``           a checkpoint directory (or file)
    a logged model (``mlflow.transformers``), linked to the run

Every artifact directory gets a ``.complete`` marker after its last file; on resume
a directory without it (an upload cut short by a crash) is uploaded again, one with
it is not.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import operator
import os
import re
import subprocess
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402
from mlflow.entities import LoggedModelStatus, Metric, Param, RunTag  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from slca.atomic import atomic_write_text  # noqa: E402
from slca.locks import ExclusiveLock  # noqa: E402

__all__ = [
    "COMPLETE_MARKER",
    "DEFAULT_DIRECTORY",
    "MAX_PARAM_VALUE_LENGTH",
    "Tracker",
    "default_pip_requirements",
    "flatten_config",
    "git_commit",
    "logged_checkpoints",
    "metric_history",
    "sqlite_uri",
]

RUN_FILE = "mlflow_run.json"
"""Written into an RL stage's ``out_dir``: the MLflow run (and experiment) that made the
model, so an evaluation can log into the same run."""
DEFAULT_DIRECTORY = Path("mlflow")
"""Where the default SQLite store and its artifacts live (relative to the working dir)."""
MAX_PARAM_VALUE_LENGTH = 6000
"""MLflow's limit on a param value; longer values are truncated (the config artifact
keeps them whole)."""
MAX_KEY_LENGTH = 250
TRUNCATION_SUFFIX = "...[truncated]"
COMPLETE_MARKER = ".complete"
CONFIG_ARTIFACT = "config/resolved.yaml"
NONFINITE_METRIC = "tracking/nonfinite_metrics"
STATUSES = ("FINISHED", "FAILED", "KILLED")
_BATCH = 100  # MLflow accepts at most 100 params/tags per batch (1000 metrics)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def sqlite_uri(directory: str | os.PathLike[str] = DEFAULT_DIRECTORY) -> str:
    """``sqlite:///<absolute directory>/mlflow.db``."""
    return f"sqlite:///{(Path(directory).resolve() / 'mlflow.db').as_posix()}"


def _sqlite_path(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :])


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings to one level with dotted keys; leaves (lists included) kept as is.

    An empty mapping is a leaf (``{}``), so no key disappears.
    """
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise TypeError(f"config key {prefix}{key!r}: keys must be strings")
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, prefix=name + "."))
        else:
            flat[name] = value
    return flat


def _param_value(value: Any) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, (Mapping, list, tuple)):
        text = json.dumps(_plain(value), sort_keys=True, default=str)
    else:
        text = str(value)
    if len(text) > MAX_PARAM_VALUE_LENGTH:
        text = text[: MAX_PARAM_VALUE_LENGTH - len(TRUNCATION_SUFFIX)] + TRUNCATION_SUFFIX
    return text


def _plain(value: Any) -> Any:
    """Config values as plain YAML/JSON data (paths and other objects as strings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def git_commit(directory: str | os.PathLike[str] | None = None) -> tuple[str, bool | None]:
    """``(commit sha, dirty)`` of the git checkout holding ``directory`` (default: the
    working dir), or ``("unknown", None)`` outside a checkout or without git."""
    cwd = Path(directory) if directory is not None else Path.cwd()
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        if sha.returncode != 0:
            return "unknown", None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown", None
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return sha.stdout.strip(), dirty


def default_pip_requirements() -> list[str]:
    """What loading a logged model needs, pinned to the running versions.

    Given to ``mlflow.transformers.log_model`` explicitly: MLflow's own inference
    imports the model and, through transformers, torchvision, which is not installed.
    Local version labels (``2.13.0+cpu``) are dropped: pip cannot resolve them from PyPI.
    """
    pins = []
    for dist in ("mlflow", "torch", "transformers", "tokenizers", "safetensors", "numpy"):
        try:
            version = metadata.version(dist).split("+", 1)[0]
        except metadata.PackageNotFoundError:
            continue
        pins.append(f"{dist}=={version}")
    return pins


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
    tracker = Tracker(directory, experiment=experiment, tracking_uri=tracking_uri)
    with tracker._writer or contextlib.nullcontext():  # one writer per store
        try:
            run = tracker.client.get_run(run_id)
        except MlflowException as exc:
            raise ValueError(f"run {run_id!r} not found in {tracker.tracking_uri}") from exc
        if run.info.experiment_id != tracker._experiment():
            raise ValueError(f"run {run_id!r} is not in experiment {experiment!r}")
        now = int(time.time() * 1000)
        finite = {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}
        tracker.client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in finite.items()])
        for report in reports:
            tracker.client.log_artifact(run_id, str(report), "eval")
    return run_id


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
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri(directory)
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


WRITER_LOCK = ".slca-writer.lock"
"""Beside ``mlflow.db``: held by the one process writing a run into the store."""
CREATE_LOCK = ".slca-create.lock"
"""Beside ``mlflow.db``: held while a process creates (and migrates) the store."""


def ensure_store(tracking_uri: str) -> None:
    """Create a SQLite store's database under a lock, so two processes starting on a new
    store at once never both migrate it: constructing an ``MlflowClient`` creates and
    migrates the database, so every client slca makes on a store it may be the first to
    open comes after this."""
    db = _sqlite_path(tracking_uri)
    if db is None:
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    with ExclusiveLock(db.parent / CREATE_LOCK, what=f"MLflow store {db}", wait=600):
        MlflowClient(tracking_uri=tracking_uri).search_experiments(max_results=1)


def logged_checkpoints(run_id: str, *, tracking_uri: str | None = None) -> dict[int, str]:
    """Step → artifact path (``checkpoints/step_<k>``) of every checkpoint of a run whose
    upload completed: its folder holds the completion marker. A folder without it is an
    upload cut short (a crash) and is left out; slca reads checkpoints from MLflow only
    through this."""
    client = MlflowClient(tracking_uri=tracking_uri)
    found = {}
    for entry in client.list_artifacts(run_id, "checkpoints"):
        name = os.path.basename(entry.path)
        if not entry.is_dir or not name.startswith("step_") or not name[5:].isdigit():
            continue
        names = {os.path.basename(f.path) for f in client.list_artifacts(run_id, entry.path)}
        if COMPLETE_MARKER in names:
            found[int(name[5:])] = entry.path
    return dict(sorted(found.items()))


def _step(step: Any) -> int:
    try:
        value = operator.index(step)
    except TypeError:
        raise TypeError(f"step must be an integer, got {step!r}") from None
    if value < 0:
        raise ValueError(f"step must be >= 0, got {value}")
    return value


class Tracker:
    """Records one training run in MLflow; a context manager that ends the run.

    >>> with Tracker("mlflow", experiment="slca") as tracker:     # doctest: +SKIP
    ...     tracker.start(run_name="slca-tiny")
    ...     tracker.log_params(config, data_hashes={"tasks": "md5:…"})
    ...     tracker.log_metrics({"reward/tool": 0.4}, step=1)

    Leaving the ``with`` block ends the run: ``FINISHED``, or ``FAILED`` on an
    exception (``KILLED`` on ``KeyboardInterrupt``). ``start`` sets MLflow's
    process-wide tracking URI and active run (``mlflow.transformers.log_model`` logs to
    the active run), so one Tracker runs at a time per process.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] = DEFAULT_DIRECTORY,
        *,
        experiment: str = "slca",
        tracking_uri: str | None = None,
    ) -> None:
        self.directory = Path(directory).resolve()
        self.tracking_uri = (
            tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri(self.directory)
        )
        self.experiment_name = experiment
        db = _sqlite_path(self.tracking_uri)
        self._writer: ExclusiveLock | None = None
        if db is not None:
            db.parent.mkdir(parents=True, exist_ok=True)
            self.artifact_location: str | None = (db.parent / "artifacts").as_uri()
            self._writer = ExclusiveLock(db.parent / WRITER_LOCK, what=f"MLflow store {db}")
        else:  # a tracking server serialises its writers itself
            self.artifact_location = None
        ensure_store(self.tracking_uri)  # a client creates (migrates) the store at once
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
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
        elif issubclass(exc_type, KeyboardInterrupt):
            self.end("KILLED")
        else:
            self.end("FAILED")

    def _experiment(self) -> str:
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
        self.experiment_id = self._experiment()
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
            run = mlflow.start_run(run_id=resume_run_id)
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
            run = mlflow.start_run(
                experiment_id=self.experiment_id, run_name=run_name, tags=dict(tags or {})
            )
            self.run_id = run.info.run_id
        return self

    def end(self, status: str = "FINISHED") -> None:
        """End the run with ``status`` (``FINISHED``, ``FAILED`` or ``KILLED``)."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        if self.run_id is None:
            return
        active = mlflow.active_run()
        try:
            if active is not None and active.info.run_id == self.run_id:
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
        params = {k: _param_value(v) for k, v in flatten_config(config).items()}
        commit, dirty = git_commit(git_dir)
        params["git.commit"] = commit
        params["git.dirty"] = "unknown" if dirty is None else str(dirty).lower()
        hashes = {str(k): str(v) for k, v in (data_hashes or {}).items()}
        for name, digest in hashes.items():
            params[f"data_hash.{name}"] = _param_value(digest)
        for key in params:
            if len(key) > MAX_KEY_LENGTH:
                raise ValueError(
                    f"config key {key[:80]!r}… is {len(key)} characters; "
                    f"MLflow allows {MAX_KEY_LENGTH}"
                )
        existing = self.client.get_run(run_id).data.params
        changed = sorted(k for k, v in params.items() if k in existing and existing[k] != v)
        new = {k: v for k, v in params.items() if k not in existing}
        tags = {"mlflow.source.git.commit": commit}
        tags.update({f"data_hash.{k}": _param_value(v) for k, v in hashes.items()})
        config_artifact = CONFIG_ARTIFACT
        if changed:
            resume_count = self.client.get_run(run_id).data.tags.get("slca.resume_count", "0")
            config_artifact = f"config/resolved.resume-{resume_count}.yaml"
            tags["slca.params_changed_on_resume"] = _param_value(", ".join(changed))
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
            self._log_text_artifact(
                yaml.safe_dump(_plain(config), sort_keys=False, allow_unicode=True),
                config_artifact,
            )
        return params

    def _log_text_artifact(self, text: str, artifact_file: str) -> None:
        directory, name = os.path.split(artifact_file)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(text, encoding="utf-8")
            self.client.log_artifact(self._require_run(), str(path), directory or None)

    # -- metrics -----------------------------------------------------------------------

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> dict[str, float]:
        """Log ``metrics`` at ``step``; returns what was actually logged.

        Non-finite values are dropped and counted (``nonfinite_dropped`` and the metric
        ``tracking/nonfinite_metrics``). A (key, step) pair at or below the last step
        logged for that key is skipped (counted in ``skipped``): after a resume, the
        steps replayed since the last checkpoint do not log twice.
        """
        run_id = self._require_run()
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
        entries = [Metric(k, v, now, step) for k, v in logged.items()]
        for i in range(0, len(entries), 1000):
            self.client.log_batch(run_id, metrics=entries[i : i + 1000])
        for key in logged:
            self.last_steps[key] = step
        return logged

    def history(self, key: str) -> list[tuple[int, float]]:
        """``[(step, value), …]`` of a metric of this run."""
        return metric_history(self._require_run(), key, tracking_uri=self.tracking_uri)

    # -- artifacts ---------------------------------------------------------------------

    def _completed_artifact_dirs(self) -> set[str]:
        done = set()
        for root in ("histograms", "checkpoints"):
            for entry in self.client.list_artifacts(self.run_id, root):
                if not entry.is_dir:
                    continue
                names = {
                    os.path.basename(f.path)
                    for f in self.client.list_artifacts(self.run_id, entry.path)
                }
                if COMPLETE_MARKER in names:
                    done.add(entry.path)
        return done

    def _upload(self, source: Path, artifact_path: str) -> None:
        """Upload a directory's contents (or one file), then the completion marker.

        What an earlier, cut-short upload left at ``artifact_path`` (files, MLflow's
        ``.artifact.uploading.*`` temporaries) is deleted first where the artifact
        store can delete (the local one can), so the folder holds this upload only."""
        run_id = self._require_run()
        if self.resumed and artifact_path not in self._complete:
            self._delete_partial(artifact_path)
        if source.is_dir():
            self.client.log_artifacts(run_id, str(source), artifact_path)
        else:
            self.client.log_artifact(run_id, str(source), artifact_path)
        with tempfile.TemporaryDirectory() as tmp:
            marker = Path(tmp) / COMPLETE_MARKER
            marker.write_text(f"{int(time.time())}\n")
            self.client.log_artifact(run_id, str(marker), artifact_path)
        self._complete.add(artifact_path)

    def _delete_partial(self, artifact_path: str) -> None:
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        repository = get_artifact_repository(self.artifact_uri())
        try:
            if repository.list_artifacts(artifact_path):
                repository.delete_artifacts(artifact_path)
        except (NotImplementedError, MlflowException):
            pass  # a store that cannot delete: the new files overwrite the old ones

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
        arrays = {}
        for segment, array in values.items():
            if not isinstance(segment, str) or not _SAFE_NAME.match(segment):
                raise ValueError(
                    f"histogram segment name {segment!r}: use letters, digits, '_', '.', '-'"
                )
            arrays[segment] = np.asarray(_to_numpy(array), dtype=np.float64).reshape(-1)
        if not arrays:
            raise ValueError("log_histograms: no segments given")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            np.savez_compressed(out / "values.npz", **arrays)
            for segment, array in arrays.items():
                _histogram_figure(array, f"{segment} — step {step}", bins, out / f"{segment}.png")
            self._upload(out, artifact_path)
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

    def artifact_uri(self, artifact_path: str = "") -> str:
        """The URI of an artifact of this run (a ``file://`` path on the default store)."""
        run = self.client.get_run(self._require_run())
        base = run.info.artifact_uri.rstrip("/")
        return f"{base}/{artifact_path}" if artifact_path else base

    # -- model -------------------------------------------------------------------------

    def log_model(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "model",
        task: str = "text-generation",
        pip_requirements: list[str] | None = None,
        registered_model_name: str | None = None,
        step: int | None = None,
    ) -> str:
        """Log a transformers model and tokenizer with ``mlflow.transformers``.

        ``pip_requirements`` defaults to :func:`default_pip_requirements` (explicit,
        so MLflow does not infer them by importing the model). A model already logged
        under ``name`` by this run is not logged again. Returns the model URI
        (``models:/<model id>``), loadable with ``mlflow.transformers.load_model``.
        """
        run_id = self._require_run()
        if not _SAFE_NAME.match(name):
            raise ValueError(f"model name {name!r}: use letters, digits, '_', '.', '-'")
        existing = self.client.search_logged_models(
            experiment_ids=[self.experiment_id],
            filter_string=f"source_run_id = '{run_id}' AND name = '{name}'",
        )
        for logged in existing:
            if logged.status == LoggedModelStatus.READY:
                return f"models:/{logged.model_id}"
        info = mlflow.transformers.log_model(
            {"model": model, "tokenizer": tokenizer},
            name=name,
            task=task,
            pip_requirements=pip_requirements or default_pip_requirements(),
            registered_model_name=registered_model_name,
            step=0 if step is None else _step(step),
        )
        return info.model_uri


def _to_numpy(array: Any) -> np.ndarray:
    if hasattr(array, "detach"):  # torch tensor, without importing torch here
        array = array.detach().to("cpu").float().numpy()
    return np.asarray(array)


def _histogram_figure(values: np.ndarray, title: str, bins: int, path: Path) -> None:
    """A PNG histogram drawn on an Agg canvas (no pyplot, no global backend switch)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    finite = values[np.isfinite(values)]
    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    if finite.size:
        axes.hist(finite, bins=bins, color="#3b6ea5")
        axes.axvline(0.0, color="black", linewidth=0.8)
        stats = f"n={finite.size}  mean={finite.mean():.4g}  std={finite.std():.4g}"
    else:
        axes.text(0.5, 0.5, "no finite values", ha="center", va="center")
        stats = "n=0"
    dropped = values.size - finite.size
    if dropped:
        stats += f"  non-finite={dropped}"
    axes.set_title(f"{title}\n{stats}", fontsize=10)
    axes.set_xlabel("value")
    axes.set_ylabel("tokens")
    figure.tight_layout()
    figure.savefig(path, format="png")
