"""The RL cycle's state and what passes between its phases: the trainer state a
checkpoint holds, one step's sampled rollouts, the seeded task order and its split
over data-parallel ranks, what the trainer needs of a tracker, and the checks that its
parts fit together.
:mod:`slca.training.rl` runs the cycle."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from slca.config.train import TrainConfig
from slca.data.record import TaskRecord
from slca.rollout.types import Rollout
from slca.simulator.core import SimulatorStats


class Tracker(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...
    def log_histograms(self, step: int, values: dict[str, Any]) -> None: ...
    def log_checkpoint(self, path: Path, step: int) -> None: ...


class TrainingDiverged(RuntimeError):
    """Too many consecutive non-finite losses; the last good checkpoint is intact."""


@dataclass
class TrainerState:
    step: int = 0
    """Steps completed."""
    tasks_drawn: int = 0
    """The data cursor: tasks taken so far (epochs reshuffle by seed)."""
    bad_steps: int = 0
    """Consecutive optimizer steps skipped for a non-finite loss."""
    skipped_steps: int = 0
    """All optimizer steps skipped so far."""
    run_id: str | None = None
    """The tracking run this training writes to (resume continues it)."""


@dataclass
class Sampled:
    """One step's rollouts and what the step's metrics need of their sampling."""

    tasks: list[TaskRecord]
    """This rank's share of the step's tasks (all of them in one process)."""
    rollouts: list[Rollout]
    """Their rollouts, ``group_size`` per task, groups numbered over the whole step."""
    started: float
    """``time.perf_counter()`` when sampling began (the step's wall clock starts there)."""
    rollout_s: float
    simulator_stats: SimulatorStats
    """The simulator's counters over this sampling."""


class TaskSampler:
    """Tasks in a seeded order, reshuffled every epoch; resumable from a cursor."""

    def __init__(self, tasks: Sequence[TaskRecord], seed: int):
        if not tasks:
            raise ValueError("no training tasks")
        self.tasks, self.seed = list(tasks), seed

    def take(self, cursor: int, n: int) -> list[TaskRecord]:
        out = []
        for position in range(cursor, cursor + n):
            epoch, index = divmod(position, len(self.tasks))
            order = list(range(len(self.tasks)))
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
            out.append(self.tasks[order[index]])
        return out


def check_data_parallel(config: TrainConfig, world: int) -> None:
    """Each rank samples whole groups and splits its rollouts into the minibatches."""
    tasks, minibatches = config.rollout.tasks_per_step, config.update.minibatches
    if tasks % world:
        raise ValueError(
            f"train.rollout.tasks_per_step={tasks} must be a multiple of the {world} "
            "data-parallel processes (each samples whole groups of its share)"
        )
    own = tasks // world * config.rollout.group_size
    if own % minibatches:
        raise ValueError(
            f"train.update.minibatches={minibatches} must divide each process's {own} "
            f"rollouts (tasks_per_step / {world} processes × group_size)"
        )


def check_parts(config: TrainConfig, update: Any, rollout_engine: Any, reference: Any) -> None:
    """Refuse a trainer whose parts do not fit: a KL term without a reference, a step that
    does not split over the ranks, a rollout engine that claims the update's module but
    generates with another."""
    if config.algorithm.loss.kl_coef > 0 and reference is None:
        raise ValueError("algorithm.loss.kl_coef > 0 needs a frozen reference model")
    check_data_parallel(config, update.world_size)
    if getattr(rollout_engine, "shares_module", False):
        if getattr(rollout_engine, "model", None) is not update.module:
            raise ValueError(
                f"rollout engine {rollout_engine.name!r} declares shares_module but "
                "does not generate with update.module; build it on update.module, or "
                "give it a copy with shares_module=False"
            )
