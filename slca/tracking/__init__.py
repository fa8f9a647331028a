"""Experiment tracking with MLflow: the only package of ``slca`` that imports MLflow.

``writer`` (:class:`Tracker`: one run's params, metrics, histograms, checkpoints and
model), ``datasets`` (the task data a run read, as MLflow dataset inputs),
``evaluation`` (evaluation results into a run), ``queries`` (metric histories,
curve CSVs, finished runs, completed checkpoints), ``store`` (the tracking URI, the
SQLite store's locks and completion markers), ``params`` (config → params),
``provenance`` (git commit, pinned requirements), ``figures`` (histograms),
``registry`` (final models as versions of ``<experiment>-policy``, the ``champion`` and
``challenger`` aliases, ``models:/`` URIs as model directories; ADR 0083) and
``run_file`` (the file naming the run that made a model). Every public name is
importable from ``slca.tracking``; importing the package imports no submodule and no
MLflow: a name's submodule loads at its first use, so ``RUN_FILE`` (or a run with
tracking off) never loads MLflow, while ``Tracker`` does.

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
    a logged model (``mlflow.transformers``), linked to the run and registered as a
    version of ``<experiment>-policy`` (:mod:`slca.tracking.registry`)

Every artifact directory gets a ``.complete`` marker after its last file; on resume
a directory without it (an upload cut short by a crash) is uploaded again, one with
it is not.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

# Before any submodule imports MLflow: the package runs first, whichever submodule is
# imported.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

_HOMES = {
    "SplitInput": "datasets",
    "read_inputs": "datasets",
    "split_input": "datasets",
    "log_evaluation": "evaluation",
    "MAX_KEY_LENGTH": "params",
    "MAX_PARAM_VALUE_LENGTH": "params",
    "TRUNCATION_SUFFIX": "params",
    "flatten_config": "params",
    "default_pip_requirements": "provenance",
    "is_model_uri": "registry",
    "model_directory": "registry",
    "policy_model_name": "registry",
    "git_commit": "provenance",
    "CURVE_METRICS": "queries",
    "RunRecord": "queries",
    "evaluation_lines": "queries",
    "experiment_runs": "queries",
    "logged_checkpoints": "queries",
    "metric_history": "queries",
    "write_curves": "queries",
    "RUN_FILE": "run_file",
    "read_run_file": "run_file",
    "COMPLETE_MARKER": "store",
    "CREATE_LOCK": "store",
    "DEFAULT_DIRECTORY": "store",
    "WRITER_LOCK": "store",
    "ensure_store": "store",
    "resolve_uri": "store",
    "sqlite_uri": "store",
    "CONFIG_ARTIFACT": "writer",
    "NONFINITE_METRIC": "writer",
    "STATUSES": "writer",
    "Tracker": "writer",
}
"""Each public name → the submodule it lives in, loaded at the name's first use."""

if TYPE_CHECKING:
    from slca.tracking.datasets import SplitInput, read_inputs, split_input
    from slca.tracking.evaluation import log_evaluation
    from slca.tracking.params import (
        MAX_KEY_LENGTH,
        MAX_PARAM_VALUE_LENGTH,
        TRUNCATION_SUFFIX,
        flatten_config,
    )
    from slca.tracking.provenance import default_pip_requirements, git_commit
    from slca.tracking.queries import (
        CURVE_METRICS,
        RunRecord,
        evaluation_lines,
        experiment_runs,
        logged_checkpoints,
        metric_history,
        write_curves,
    )
    from slca.tracking.registry import is_model_uri, model_directory, policy_model_name
    from slca.tracking.run_file import RUN_FILE, read_run_file
    from slca.tracking.store import (
        COMPLETE_MARKER,
        CREATE_LOCK,
        DEFAULT_DIRECTORY,
        WRITER_LOCK,
        ensure_store,
        resolve_uri,
        sqlite_uri,
    )
    from slca.tracking.writer import CONFIG_ARTIFACT, NONFINITE_METRIC, STATUSES, Tracker


def __getattr__(name: str) -> Any:
    """A public name, from its submodule (imported now: MLflow only where one needs it)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'slca.tracking' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"slca.tracking.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "COMPLETE_MARKER",
    "CONFIG_ARTIFACT",
    "CREATE_LOCK",
    "CURVE_METRICS",
    "DEFAULT_DIRECTORY",
    "MAX_KEY_LENGTH",
    "MAX_PARAM_VALUE_LENGTH",
    "NONFINITE_METRIC",
    "RUN_FILE",
    "STATUSES",
    "TRUNCATION_SUFFIX",
    "WRITER_LOCK",
    "RunRecord",
    "SplitInput",
    "Tracker",
    "default_pip_requirements",
    "ensure_store",
    "evaluation_lines",
    "experiment_runs",
    "flatten_config",
    "git_commit",
    "is_model_uri",
    "log_evaluation",
    "logged_checkpoints",
    "metric_history",
    "model_directory",
    "policy_model_name",
    "read_inputs",
    "read_run_file",
    "resolve_uri",
    "split_input",
    "sqlite_uri",
    "write_curves",
]
