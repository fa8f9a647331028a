"""Training tasks: base model, SFT, one RL stage (slca.training.stages)."""

from __future__ import annotations

import shutil
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from slca.config import TrainConfig
from slca.training.rl import latest_checkpoint
from slca.training.stages import (
    BaseModelParams,
    SFTParams,
    build_base_model,
    data_hashes,
    run_sft,
    run_train,
)
from tasks.steps import Step, as_paths, run_step, same_started_run


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


@task(name="train", cache_policy=NO_CACHE)
def train_task(config: TrainConfig, state_dir: str) -> str:
    """One RL stage (every rollout → score → update cycle); returns the MLflow run id.

    An interrupted stage that started with the same params, code and inputs continues
    from its newest checkpoint and MLflow run; checkpoints left by a different
    configuration are removed first, so they cannot be resumed by mistake.
    """
    logger = get_run_logger()
    step = Step(
        "train",
        config,
        inputs=as_paths(config.init_dir, config.in_dir),
        outputs=as_paths(config.out_dir),
        state_dir=state_dir,
    )
    record = step.up_to_date()
    if record is not None:
        logger.info(f"train: up to date ({config.out_dir}); skipped")
        return record["result"]
    checkpoint = latest_checkpoint(config.checkpoint_dir)
    resume = checkpoint is not None and same_started_run(step)
    if resume:
        logger.info(f"train: resuming from {checkpoint}")
    elif checkpoint is not None:
        logger.info(f"train: removing checkpoints of another configuration in {checkpoint.parent}")
        for stale in Path(config.checkpoint_dir).glob("step_*"):
            shutil.rmtree(stale)

    def progress(cycle: int, metrics: dict[str, float]) -> None:
        figures = ", ".join(
            f"{k}={metrics[k]:.3f}"
            for k in ("reward/tool", "reward/sum", "actor/pg_loss")
            if k in metrics
        )
        logger.info(f"train: step {cycle}/{config.steps}: {figures}")

    step.mark("started")
    run_id = run_train(
        config, resume=resume, progress=progress, data_hashes=data_hashes(config.in_dir)
    )
    step.mark("completed", run_id)
    return run_id
