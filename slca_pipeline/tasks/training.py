"""Training tasks: base model, SFT, one RL stage (slca.training.stages)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.utilities.annotations import opaque

from slca.config.steps import BaseModelParams, SFTParams
from slca.config.train import TrainConfig
from slca.rewards.score import RewardBreakdown
from slca.training.rl import Sampled, Trainer
from slca.training.session import data_hashes, training_session
from slca.training.stages import build_base_model, progress_bar, run_sft
from slca_pipeline.tasks.steps import Step, as_paths, step_task


def base_model_step(params: BaseModelParams) -> Step:
    return Step(
        "base_model",
        params,
        inputs=as_paths(params.path if params.kind == "path" else params.in_dir),
        outputs=as_paths(params.out_dir),
    )


@step_task(base_model_step, name="base_model")
def base_model_task(params: BaseModelParams) -> str:
    """Write the base checkpoint; returns its directory."""
    return str(build_base_model(params))


def sft_step(params: SFTParams) -> Step:
    return Step(
        "sft",
        params,
        inputs=as_paths(params.base_dir, params.in_dir),
        outputs=as_paths(params.out_dir),
    )


@step_task(sft_step, name="sft")
def sft_task(params: SFTParams) -> dict[str, float]:
    """SFT warm start (an MLflow run unless ``sft.tracking_dir`` is null); returns the
    first/last loss figures. Its progress goes to the task's log every 30 s."""
    return run_sft(params, progress=progress_bar("sft", logger=get_run_logger()))


def train_step(params: TrainConfig) -> Step:
    return Step(
        "train",
        params,
        inputs=as_paths(params.init_dir, params.in_dir),
        outputs=as_paths(params.out_dir),
    )


@step_task(train_step, name="train")
def train_task(params: TrainConfig, overwrite: bool = False) -> str:
    """One RL stage, each cycle's rollout, score and update a task of its own (the
    trainer and its model stay in this process between them); returns the MLflow run id.

    Like the DVC stage, it always asks to resume: the run continues an interrupted run of
    its own configuration from its newest checkpoint, starts fresh where there is none,
    and refuses checkpoints of another configuration unless ``overwrite``
    (:func:`slca.training.identity.plan_start`)."""
    hashes = data_hashes(params.in_dir)
    shown = progress_bar(f"train {params.estimator}", params.steps, logger=get_run_logger())
    with training_session(
        params, resume=True, overwrite=overwrite, data_hashes=hashes, progress=shown
    ) as trainer:
        trainer.begin()  # the step-0 validation, as Trainer.run does it
        while not trainer.done:
            sampled = rollout_task(trainer)
            # opaque(): Prefect would otherwise walk every token list of the rollouts and
            # scores, twice per task, looking for upstream futures (~1.5 s a task on the
            # demo, 100x the scoring itself); it still links each to the task it came from.
            scores = score_task(trainer, opaque(sampled))
            update_task(trainer, opaque(sampled), opaque(scores))
    return trainer.state.run_id


# Rollouts and scoring change no trainer state and talk to the simulator or a judge
# (possibly remote): they may be retried. The update may not (it steps the optimizer).
@task(name="rollout", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def rollout_task(trainer: Trainer) -> Sampled:
    """The next step's tasks, ``group_size`` rollouts each."""
    return trainer.sample()


@task(name="score", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def score_task(trainer: Trainer, sampled: Sampled) -> list[RewardBreakdown]:
    """HierR of every rollout."""
    return trainer.score(sampled)


@task(name="update", cache_policy=NO_CACHE)
def update_task(
    trainer: Trainer, sampled: Sampled, scores: list[RewardBreakdown]
) -> dict[str, float]:
    """Advantages and the policy update; logs the step and checkpoints when due."""
    metrics = trainer.learn(sampled, scores)
    trainer.end_step(metrics)
    figures = ", ".join(
        f"{k}={metrics[k]:.3f}"
        for k in ("reward/tool", "reward/sum", "actor/pg_loss")
        if k in metrics
    )
    # each step at debug level: the progress line (every 30 s, with the rewards) is info
    get_run_logger().debug(f"train: step {trainer.state.step}/{trainer.config.steps}: {figures}")
    return metrics
