"""The RL cycle: sample tasks → G rollouts each → score → advantages → update.

The trainer orchestrates; the algorithms live elsewhere and are reached by name
or by one call each: rollouts (:func:`slca.rollout.loop.run_rollouts`), rewards
(:func:`slca.rewards.score.score_batch`), advantages (the registry,
:func:`slca.advantages.compute_advantages` — the only dispatch path), loss
(:func:`slca.losses.policy_loss`, through the update phase in
:mod:`slca.training.policy_update`), optimisation (an update engine: plain torch or
DeepSpeed), checkpoints (:mod:`slca.training.checkpoints`) and tracking (an optional
tracker; MLflow in :mod:`slca.tracking`).

Data parallel (``torchrun``/``deepspeed`` launchers, as verl and TRL do it): every rank
draws the same ``tasks_per_step`` tasks, samples the rollouts of its own contiguous
share of them (whole groups, so no group spans ranks) and scores them; the rollouts
and scores are then gathered, so every rank computes the advantages and the metrics of
the whole step exactly as one process would, and updates on its own rows. Each rank's
loss is scaled so that the gradient average of DDP/DeepSpeed equals the one-process
objective over the global minibatch.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from slca.advantages import compute_advantages
from slca.config.train import TrainConfig
from slca.data.record import TaskRecord
from slca.eval.in_domain import in_domain_metrics
from slca.faults import naming_the_place
from slca.generation.engines import Engine, SamplingParams
from slca.modeling import eval_autocast
from slca.rewards.preference import SummaryScorer, build_summary_scorer
from slca.rewards.score import RewardBreakdown, per_block_rewards, score_batch
from slca.rollout.loop import RolloutLimits, run_rollouts
from slca.rollout.types import Rollout
from slca.segments import head_masks, union_mask
from slca.simulator import Simulator
from slca.simulator.core import SimulatorStats
from slca.training.batch import Batch, collate
from slca.training.checkpoints import (
    SET_ASIDE_PREFIX,
    CheckpointError,
    complete_checkpoints,
    first_line,
    set_aside,
    verify_checkpoint,
)
from slca.training.engines import UpdateEngine, explain_oom
from slca.training.policy_update import (
    gradient_cosine,
    minibatch_updates,
    old_and_reference_logprobs,
)
from slca.training.rl_state import (
    Sampled,
    TaskSampler,
    Tracker,
    TrainerState,
    TrainingDiverged,
    check_parts,
)
from slca.training.step_metrics import step_metrics

log = logging.getLogger(__name__)


PHASES: tuple[str, ...] = ("rollout", "score", "logprobs", "update", "backward", "optimizer")
"""The phases every step's metrics time, as ``perf/<phase>_s`` (seconds, this rank's):
``rollout`` (drawing tasks, syncing weights, sampling; the simulator included),
``score`` (HierR, the summary scorer included), ``logprobs`` (old and reference
log-probs), ``update`` (the policy update: forwards and loss, ``backward`` and
``optimizer``, which are also given on their own). On CUDA the backward pass runs
asynchronously, so its kernels are charged to the next phase that waits for them
(``optimizer``, whose gradient norm synchronises)."""


class Trainer:
    """Runs :class:`TrainConfig` steps; see the module docstring for who does what."""

    def __init__(
        self,
        config: TrainConfig,
        *,
        tasks: Sequence[TaskRecord],
        tokenizer: Any,
        update: UpdateEngine,
        rollout_engine: Engine,
        simulator: Simulator,
        checkpoint_dir: str | Path,
        reference: torch.nn.Module | None = None,
        tracker: Tracker | None = None,
        summary_scorer: SummaryScorer | None = None,
        progress: Any = None,
        run_id: str | None = None,
        validation_tasks: Sequence[TaskRecord] = (),
    ):
        check_parts(config, update, rollout_engine, reference)
        if reference is not None:  # the policy's device and dtype (bf16 under DeepSpeed)
            dtype = next(update.module.parameters()).dtype
            reference.to(device=update.device, dtype=dtype).eval()
        self.config, self.tokenizer, self.update = config, tokenizer, update
        self.rollout_engine, self.simulator, self.reference = rollout_engine, simulator, reference
        if summary_scorer is None:  # built once: a reward model loads once, not every step
            summary = config.rewards.summary
            if summary.name == "judge":
                raise ValueError(
                    "train.rewards.summary.name=judge needs the judge's engine: build the "
                    "trainer with slca.training.factory.build_trainer, or pass summary_scorer"
                )
            summary_scorer = build_summary_scorer(summary)
        self.tracker, self.summary_scorer, self.progress = tracker, summary_scorer, progress
        # validation's figures are defined against gold (as evaluate's): the run's reward
        # settings and summary scorer, with R_tool in process mode whatever the run's mode
        self.validation_rewards = config.rewards.model_copy(update={"mode": "process"})
        self._phase_s: dict[str, float] = {}
        self.sampler = TaskSampler(tasks, config.seed)
        self.tasks_by_id = {t.id: t for t in tasks}
        self.validation_tasks = list(validation_tasks)
        self.checkpoint_dir = Path(checkpoint_dir)
        self.state = TrainerState(run_id=run_id)

    # ------------------------------------------------------------------ run

    def run(self, *, resume: bool = False) -> TrainerState:
        if resume:
            self.restore()
        self.begin()
        while not self.done:
            self.end_step(self.train_step())
        return self.state

    def begin(self) -> None:
        """Before the first update: validate the starting policy (the SFT checkpoint) and
        log it at step 0, so a held-out learning curve starts where training does. Only
        at step 0: a run restored from a checkpoint logged its step 0 when it started
        (and the tracker skips a step it already holds)."""
        if self.state.step != 0 or not self._validation_due():
            return
        metrics = self._validated({})
        if self.tracker is not None:
            self.tracker.log_metrics(metrics, step=0)

    @property
    def done(self) -> bool:
        return self.state.step >= self.config.steps

    def train_step(self) -> dict[str, float]:
        """One cycle: :meth:`sample` → :meth:`score` → :meth:`learn` (an orchestrator,
        e.g. a Prefect flow, may call the three itself, one task each)."""
        sampled = self.sample()
        return self.learn(sampled, self.score(sampled))

    def end_step(self, metrics: dict[str, float]) -> None:
        """Validate when due, log a finished step's metrics, report progress, checkpoint
        when due."""
        if self._validation_due():
            metrics = self._validated(metrics)
        if self.tracker is not None:
            self.tracker.log_metrics(metrics, step=self.state.step)
        if self.progress is not None:
            self.progress(self.state.step, metrics)
        last = self.state.step == self.config.steps
        if last or self.state.step % self.config.checkpoint_every == 0:
            self.checkpoint()

    def _validation_due(self) -> bool:
        """Every ``validation.every`` steps, step 0 (before any update) and the last."""
        every = self.config.validation.every
        if not every or not self.validation_tasks:
            return False
        return self.state.step % every == 0 or self.state.step == self.config.steps

    def _validated(self, metrics: dict[str, float]) -> dict[str, float]:
        """``metrics`` with :meth:`validate`'s figures and its wall time."""
        started = time.perf_counter()
        metrics = {**metrics, **self.validate()}
        metrics["perf/validate_s"] = time.perf_counter() - started
        return metrics

    def validate(self) -> dict[str, float]:
        """One greedy rollout per validation task with the current weights, scored
        against gold as ``evaluate`` scores the test split: ``val/<metric>`` (see
        :func:`slca.eval.in_domain.in_domain_metrics`). Changes no trainer state."""
        rollout = self.config.rollout
        self._sync_rollout_weights()
        world, rank = self.update.world_size, self.update.rank
        n = len(self.validation_tasks)
        first, last = n * rank // world, n * (rank + 1) // world  # this rank's share
        with self._measuring():
            rollouts = run_rollouts(
                self.validation_tasks[first:last],
                engine=self.rollout_engine,
                tokenizer=self.tokenizer,
                simulator=self.simulator,
                group_size=1,
                sampling=SamplingParams(max_new_tokens=rollout.max_new_tokens, temperature=0.0),
                limits=RolloutLimits(
                    max_turns=rollout.max_turns, max_total_tokens=rollout.max_total_tokens
                ),
                first_group=first,
            )
        tasks = {t.id: t for t in self.validation_tasks}
        scores = score_batch(
            rollouts, tasks, self.validation_rewards, summary_scorer=self.summary_scorer
        )
        scores = [s for part in self._gather(scores) for s in part]
        return {f"val/{k.partition('/')[2]}": v for k, v in in_domain_metrics(scores).items()}

    def sample(self) -> Sampled:
        """The next step's tasks and their ``group_size`` rollouts each (with the
        current weights). Changes no trainer state: a failed call can be retried."""
        cfg = self.config
        started = time.perf_counter()
        self._phase_s = {}
        step = self.state.step + 1
        drawn = self.sampler.take(self.state.tasks_drawn, cfg.rollout.tasks_per_step)
        share = len(drawn) // self.update.world_size
        first = self.update.rank * share
        tasks = drawn[first : first + share]
        self._sync_rollout_weights()
        self.simulator.stats.reset()
        with self._generation():
            rollouts = run_rollouts(
                tasks,
                engine=self.rollout_engine,
                tokenizer=self.tokenizer,
                simulator=self.simulator,
                group_size=cfg.rollout.group_size,
                sampling=SamplingParams(
                    max_new_tokens=cfg.rollout.max_new_tokens,
                    temperature=cfg.rollout.temperature,
                    top_p=cfg.rollout.top_p,
                    seed=cfg.seed * 100_003 + step,
                ),
                limits=RolloutLimits(
                    max_turns=cfg.rollout.max_turns, max_total_tokens=cfg.rollout.max_total_tokens
                ),
                first_group=first,
            )
        return Sampled(
            tasks,
            rollouts,
            started,
            time.perf_counter() - started,
            replace(self.simulator.stats),
        )

    def score(self, sampled: Sampled) -> list[RewardBreakdown]:
        """HierR of every rollout (asks the summary scorer: a judge may be remote)."""
        with self._timed("score"):
            return score_batch(
                sampled.rollouts,
                self.tasks_by_id,
                self.config.rewards,
                summary_scorer=self.summary_scorer,
            )

    def learn(self, sampled: Sampled, scores: Sequence[RewardBreakdown]) -> dict[str, float]:
        """Advantages, the policy update, and the step's metrics; advances the step."""
        cfg, algorithm = self.config, self.config.algorithm
        step = self.state.step + 1
        # every rank holds the whole step (rank order = task order), and updates its rows
        rollouts, scores, simulator_stats = self._whole_step(sampled, scores)
        own = len(sampled.rollouts)
        rows = torch.arange(self.update.rank * own, (self.update.rank + 1) * own)
        batch = collate(rollouts, self.tokenizer.pad_token_id)
        masks = head_masks(
            batch.kind_codes, algorithm.segments.routing, mode=algorithm.segments.mode
        )
        loss_mask = union_mask(masks)
        with self._timed("logprobs"):
            old, ref = old_and_reference_logprobs(self.update, cfg, batch, rows, self.reference)
        advantages, adv_metrics, head_rewards = self._advantages(batch, masks, rollouts, scores)
        actor = self._update(batch, rows, (old, ref), advantages, (loss_mask, masks), step)
        self.state.step = step
        self.state.tasks_drawn += cfg.rollout.tasks_per_step
        elapsed = time.perf_counter() - sampled.started
        metrics = step_metrics(
            rollouts,
            scores,
            batch,
            (advantages, loss_mask, masks, head_rewards),
            weights=algorithm.advantage.weights,
            sections=(
                adv_metrics,
                actor,
                simulator_stats.as_metrics(),
                self.summary_scorer.metrics(),
            ),
            perf={
                "perf/step_s": elapsed,
                **{f"perf/{phase}_s": self._phase_s.get(phase, 0.0) for phase in PHASES},
                "perf/rollout_s": sampled.rollout_s,
                "perf/tokens_per_s": batch.n_tokens / elapsed,
            },
        )
        self._phase_s = {}
        return metrics

    def _whole_step(
        self, sampled: Sampled, scores: Sequence[RewardBreakdown]
    ) -> tuple[list[Rollout], list[RewardBreakdown], SimulatorStats]:
        """The step's rollouts, scores and simulator counters of every rank, in rank order."""
        parts = self._gather((sampled.rollouts, list(scores), sampled.simulator_stats))
        rollouts = [r for part in parts for r in part[0]]
        scores = [s for part in parts for s in part[1]]
        return rollouts, scores, SimulatorStats.total([part[2] for part in parts])

    def _advantages(
        self,
        batch: Batch,
        masks: dict[str, Tensor],
        rollouts: list[Rollout],
        scores: list[RewardBreakdown],
    ) -> tuple[Tensor, dict[str, Any], dict[str, Tensor]]:
        """``(B, T)`` advantages from the estimator the configuration names, its metrics,
        and the ``(B,)`` head rewards they came from."""
        algorithm = self.config.algorithm
        extra = {}
        if algorithm.advantage.granularity == "per_call":
            extra = {
                "call_rewards": _block_reward_matrix(rollouts, scores),
                "call_index": batch.call_index,
            }
        head_rewards = {
            "tool": torch.tensor([s.tool for s in scores]),
            "summary": torch.tensor([s.summary for s in scores]),
        }
        advantages, adv_metrics = compute_advantages(
            algorithm.advantage.estimator,
            rewards=head_rewards,
            head_masks=masks,
            group_index=batch.group_index,
            weights=algorithm.advantage.weights,
            norm_by_std=algorithm.advantage.norm_by_std,
            eps=algorithm.advantage.eps,
            granularity=algorithm.advantage.granularity,
            guarded=torch.tensor([s.guard_applied for s in scores], dtype=torch.bool),
            **algorithm.advantage.switches(),
            **extra,
        )
        return advantages, adv_metrics, head_rewards

    def _update(
        self,
        batch: Batch,
        rows: Tensor,
        logprobs: tuple[Tensor | None, Tensor | None],
        advantages: Tensor,
        loss_masks: tuple[Tensor, dict[str, Tensor]],
        step: int,
    ) -> dict[str, float]:
        """The minibatch updates of this rank's ``rows`` (``logprobs``: old and reference,
        ``loss_masks``: the union and the heads'), then, when due, the gradient probe and
        the advantage histograms; the ``actor/*`` metrics."""
        cfg = self.config
        (old, ref), (loss_mask, masks) = logprobs, loss_masks
        with self._timed("update"), explain_oom(cfg.update.micro_batch_size):
            actor = minibatch_updates(
                self.update,
                cfg,
                batch,
                rows,
                old,
                ref,
                advantages,
                loss_mask,
                step,
                timed=self._timed,
                gather=self._gather,
                optimizer_stepped=self._optimizer_stepped,
            )
        actor["actor/skipped_steps"] = float(self.state.skipped_steps)
        if step % cfg.histogram_every == 0:
            cosine = gradient_cosine(self.update, cfg, batch, rows, old, advantages, masks)
            actor["actor/grad_cos_tool_sum"] = cosine  # rank 0's: the step's first rows
            if self.tracker is not None:
                self.tracker.log_histograms(
                    step, {head: advantages[mask].numpy() for head, mask in masks.items()}
                )
        return actor

    # ------------------------------------------------------------------ pieces

    @contextlib.contextmanager
    def _timed(self, phase: str) -> Any:
        """Adds the block's wall time to ``phase`` (see :data:`PHASES`)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self._phase_s[phase] = self._phase_s.get(phase, 0.0) + time.perf_counter() - started

    def _sync_rollout_weights(self) -> None:
        if not getattr(self.rollout_engine, "shares_module", False):
            # a separate engine (vLLM, or an HF copy under ZeRO-3) gets the new weights
            self.rollout_engine.load_weights(self.update.state_dict_for_rollout())

    def _generation(self) -> contextlib.AbstractContextManager[Any]:
        """Generation with the update engine's own module runs in its precision."""
        if getattr(self.rollout_engine, "shares_module", False):
            return self.update.autocast()
        return contextlib.nullcontext()

    def _measuring(self) -> contextlib.AbstractContextManager[Any]:
        """Validation generates in the measurement precision (:func:`eval_autocast`), as
        ``evaluate`` and headroom do, whatever precision training runs in, so step 0 (the
        SFT policy) compares with later steps and with ``evaluate``. vLLM generates in its
        own processes in its own dtype (``rollout.vllm.dtype``)."""
        if getattr(self.rollout_engine, "name", None) == "vllm":
            return contextlib.nullcontext()
        return eval_autocast(self.update.device)

    def _gather(self, value: Any) -> list[Any]:
        """``value`` of every rank, in rank order (``[value]`` in one process)."""
        if self.update.world_size == 1:
            return [value]
        import torch.distributed as dist

        out: list[Any] = [None] * self.update.world_size
        dist.all_gather_object(out, value)
        return out

    def _optimizer_stepped(self, applied: bool) -> None:
        """Counts skipped optimizer steps; too many in a row stop the run."""
        if applied:
            self.state.bad_steps = 0
            return
        self.state.bad_steps += 1
        self.state.skipped_steps += 1
        if self.state.bad_steps >= self.config.max_bad_steps:
            raise TrainingDiverged(
                f"{self.state.bad_steps} consecutive non-finite losses at step "
                f"{self.state.step + 1}; stopping with the last checkpoint in "
                f"{self.checkpoint_dir} intact"
            )

    # ------------------------------------------------------------------ checkpoints

    def checkpoint(self) -> Path:
        """Weights, optimizer, scheduler, RNG and trainer state under ``step_<k>``; the
        engine writes it beside the target and renames it, so it is complete or absent."""
        with naming_the_place(self.checkpoint_dir, "train.checkpoint_dir"):
            path = self.update.save(
                self.checkpoint_dir / f"step_{self.state.step:06d}",
                client_state=asdict(self.state),
                checksums=self.config.verify_checkpoints,
            )
        if self.tracker is not None:
            self.tracker.log_checkpoint(path, self.state.step)
        return path

    def restore(self) -> bool:
        """Continue from the newest checkpoint that verifies and loads; False when there
        is none. One that fails is reported in one line and set aside (renamed, not
        deleted) by the main process, and the one before it is tried. With
        ``train.verify_checkpoints`` off nothing is hashed: the newest that loads."""
        candidates = complete_checkpoints(self.checkpoint_dir)
        for checkpoint in reversed(candidates):
            problem = verify_checkpoint(checkpoint) if self.config.verify_checkpoints else None
            if problem is None:
                try:
                    self.state = TrainerState(**self.update.load(checkpoint))
                    return True
                except Exception as exc:  # noqa: BLE001 — torch and safetensors raise many kinds
                    problem = f"does not load ({type(exc).__name__}: {first_line(exc)})"
            if self.update.is_main_process:
                moved = set_aside(checkpoint)
                log.warning("checkpoint %s: %s; set aside as %s", checkpoint, problem, moved.name)
        if candidates:
            raise CheckpointError(
                f"train.checkpoint_dir {self.checkpoint_dir}: none of its {len(candidates)} "
                f"checkpoints verifies (each set aside as {SET_ASIDE_PREFIX}step_*); start "
                "again with --overwrite, or restore them from a copy"
            )
        return False


def _block_reward_matrix(rollouts, scores) -> Tensor:
    per_block = [per_block_rewards(r, s) for r, s in zip(rollouts, scores, strict=True)]
    width = max((len(b) for b in per_block), default=0)
    out = torch.full((len(per_block), max(width, 1)), math.nan)
    for i, rewards in enumerate(per_block):
        out[i, : len(rewards)] = torch.tensor(rewards)
    return out
