"""The ``train`` flow: one RL stage from the SFT model, each cycle's rollout, score and
update as tasks (the trainer and its model stay in this process between them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from flows.params import DEFAULT_STATE_DIR, Estimator, read_document, section
from slca.config import TrainConfig
from slca.training.stages import data_hashes, training_session
from tasks.training import rollout_task, score_task, train_done_task, train_plan_task, update_task


def train_config(
    document: dict[str, Any], params_file: str | Path, estimator: str | None
) -> TrainConfig:
    """The ``train`` section; with ``estimator``, that estimator's run, with its own
    ``out_dir/<estimator>``, ``checkpoint_dir/<estimator>`` and MLflow run name."""
    config = section(document, "train", TrainConfig, params_file)
    if estimator is None:
        return config
    data = config.model_dump()
    data["estimator"] = data["algorithm"]["advantage"]["estimator"] = estimator
    data["out_dir"] = str(Path(config.out_dir) / estimator)
    data["checkpoint_dir"] = str(Path(config.checkpoint_dir) / estimator)
    data["run_name"] = config.run_name or estimator
    return section({"train": data}, "train", TrainConfig, params_file)


@flow(name="train", validate_parameters=True)
def train(
    params_file: Path = Path("params.yaml"),
    overrides: dict[str, Any] | None = None,
    state_dir: Path = DEFAULT_STATE_DIR,
    estimator: Estimator | None = None,
) -> str:
    """The ``train`` section of ``params_file`` (optionally for one ``estimator``);
    returns the MLflow run id."""
    config = train_config(read_document(params_file, overrides), params_file, estimator)
    plan = train_plan_task(config, str(state_dir))
    if plan["run_id"] is not None:
        return plan["run_id"]
    hashes = data_hashes(config.in_dir)
    with training_session(config, resume=plan["resume"], data_hashes=hashes) as trainer:
        while not trainer.done:
            sampled = rollout_task(trainer)
            update_task(trainer, sampled, score_task(trainer, sampled))
    return train_done_task(config, str(state_dir), trainer.state.run_id)


if __name__ == "__main__":
    train()
