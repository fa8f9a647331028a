"""Training tasks: base model, SFT, one RL stage (slca.training.stages)."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from slca.config import TrainConfig
from slca.rewards.score import RewardBreakdown
from slca.training.rl import Sampled, Trainer, latest_checkpoint
from slca.training.stages import (
    BaseModelParams,
    SFTParams,
    build_base_model,
    checkpoint_path,
    run_sft,
)
from slca_pipeline.tasks.steps import Step, as_paths, run_step, same_started_run


@task(name="base_model", cache_policy=NO_CACHE)
def base_model_task(params: BaseModelParams, state_dir: str) -> str:
    """Write the base checkpoint; returns its directory."""
    step = Step(
        "base_model",
        params,
        inputs=as_paths(params.path if params.kind == "path" else params.in_dir),
        outputs=as_paths(params.out_dir),
        state_dir=state_dir,
    )
    return run_step(step, lambda: str(build_base_model(params)), get_run_logger().info)


@task(name="sft", cache_policy=NO_CACHE)
def sft_task(params: SFTParams, state_dir: str) -> dict[str, float]:
    """SFT warm start; returns the first/last loss figures."""
    step = Step(
        "sft",
        params,
        inputs=as_paths(params.base_dir, params.in_dir),
        outputs=as_paths(params.out_dir),
        state_dir=state_dir,
    )
    return run_step(step, lambda: run_sft(params), get_run_logger().info)


def _train_step_record(config: TrainConfig, state_dir: str) -> Step:
    return Step(
        "train",
        config,
        inputs=as_paths(config.init_dir, config.in_dir),
        outputs=as_paths(config.out_dir),
        state_dir=state_dir,
    )


@task(name="train-plan", cache_policy=NO_CACHE)
def train_plan_task(config: TrainConfig, state_dir: str) -> dict[str, Any]:
    """Whether the RL stage is up to date (``{"run_id": …}``) or must run, resuming
    (``{"resume": True}``) when an interrupted stage started with the same params, code
    and inputs. It removes nothing: the run itself refuses checkpoints of another
    configuration (or replaces them under ``overwrite``, after its inputs load)."""
    logger = get_run_logger()
    step = _train_step_record(config, state_dir)
    record = step.up_to_date()
    if record is not None:
        logger.info(f"train: up to date ({config.out_dir}); skipped")
        return {"run_id": record["result"]}
    checkpoint = latest_checkpoint(checkpoint_path(config))
    resume = checkpoint is not None and same_started_run(step)
    if resume:
        logger.info(f"train: resuming from {checkpoint}")
    step.mark("started")
    return {"run_id": None, "resume": resume}


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
    get_run_logger().info(f"train: step {trainer.state.step}/{trainer.config.steps}: {figures}")
    return metrics


@task(name="train-done", cache_policy=NO_CACHE)
def train_done_task(config: TrainConfig, state_dir: str, run_id: str) -> str:
    """Record the RL stage as completed (its outputs are written)."""
    _train_step_record(config, state_dir).mark("completed", run_id)
    return run_id
