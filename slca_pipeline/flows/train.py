"""The ``train`` flow: one RL stage from the SFT model (the ``train`` task, whose
rollout, score and update tasks run each cycle), after the task data passed validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from slca.config.data import ValidateParams
from slca.config.train import TrainConfig
from slca_pipeline.flows.params import DEFAULT_STATE_DIR, Estimator, load_document, section
from slca_pipeline.tasks.artifacts import publish_training_run
from slca_pipeline.tasks.data import validate_task
from slca_pipeline.tasks.steps import run_step
from slca_pipeline.tasks.training import train_task


def train_config(
    document: dict[str, Any], params_file: str | Path, estimator: str | None
) -> TrainConfig:
    """The ``train`` section; with ``estimator``, that estimator's run with its own MLflow
    run name and directories: ``{estimator}`` in ``out_dir``/``checkpoint_dir`` names it
    (the defaults), and a path without the placeholder gets ``/<estimator>`` appended."""
    config = section(document, "train", TrainConfig, params_file)
    if estimator is None:
        return config
    raw = document.get("train") or {}
    data = config.model_dump()
    data["estimator"] = data["algorithm"]["advantage"]["estimator"] = estimator
    data["run_name"] = config.run_name or estimator
    for key in ("out_dir", "checkpoint_dir"):
        given = raw.get(key, TrainConfig.model_fields[key].default)
        data[key] = given if "{estimator}" in given else str(Path(given) / "{estimator}")
    if isinstance(raw.get("curve_path"), str) and "{estimator}" in raw["curve_path"]:
        data["curve_path"] = raw["curve_path"]
    return section({"train": data}, "train", TrainConfig, params_file)


@flow(name="train", validate_parameters=True)
def train(
    params_file: Path = Path("params.yaml"),
    overrides: dict[str, Any] | None = None,
    state_dir: Path = DEFAULT_STATE_DIR,
    document: dict[str, Any] | None = None,
    estimator: Estimator | None = None,
    overwrite: bool = False,
) -> str:
    """The ``train`` section of ``params_file`` (optionally for one ``estimator``) after
    the task data passed validation; returns the MLflow run id. ``overwrite`` lets the
    run replace another configuration's checkpoints and output; ``document``: the params
    a parent flow read (:func:`load_document`)."""
    document = load_document(params_file, overrides, document)
    config = train_config(document, params_file, estimator)
    run_step(validate_task, section(document, "validate", ValidateParams, params_file), state_dir)
    run_id = run_step(train_task, config, state_dir, overwrite=overwrite)
    publish_training_run(config.estimator, run_id, config.tracking_dir)
    return run_id


if __name__ == "__main__":
    train()
