"""The ``train`` flow: one RL stage from the SFT model, each cycle's rollout, score and
update as tasks (the trainer and its model stay in this process between them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from slca.config import TrainConfig
from slca.data.params import ValidateParams
from slca.training.stages import data_hashes, training_session
from slca_pipeline.flows.params import DEFAULT_STATE_DIR, Estimator, read_document, section
from slca_pipeline.tasks.data import validate_task
from slca_pipeline.tasks.training import (
    rollout_task,
    score_task,
    train_done_task,
    train_plan_task,
    update_task,
)


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
    estimator: Estimator | None = None,
    overwrite: bool = False,
) -> str:
    """The ``train`` section of ``params_file`` (optionally for one ``estimator``) after
    the task data passed validation; returns the MLflow run id. ``overwrite`` lets the
    run replace another configuration's checkpoints and output."""
    document = read_document(params_file, overrides)
    config = train_config(document, params_file, estimator)
    validate_task(section(document, "validate", ValidateParams, params_file), str(state_dir))
    plan = train_plan_task(config, str(state_dir))
    if plan["run_id"] is not None:
        return plan["run_id"]
    hashes = data_hashes(config.in_dir)
    with training_session(
        config, resume=plan["resume"], overwrite=overwrite, data_hashes=hashes
    ) as trainer:
        while not trainer.done:
            sampled = rollout_task(trainer)
            update_task(trainer, sampled, score_task(trainer, sampled))
    return train_done_task(config, str(state_dir), trainer.state.run_id)


if __name__ == "__main__":
    train()
