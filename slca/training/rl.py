"""The RL cycle: sample tasks → G rollouts each → score → advantages → update.

The trainer orchestrates; the algorithms live elsewhere and are reached by name
or by one call each: rollouts (:func:`slca.rollout.loop.run_rollouts`), rewards
(:func:`slca.rewards.score.score_batch`), advantages (the registry,
:func:`slca.advantages.compute_advantages` — the only dispatch path), loss
(:func:`slca.losses.policy_loss`), optimisation (an update engine: plain torch or
DeepSpeed) and tracking (an optional tracker; MLflow in :mod:`slca.tracking`).

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
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from slca.advantages import compute_advantages
from slca.config.train import TrainConfig
from slca.data.record import TaskRecord
from slca.eval.in_domain import in_domain_metrics
from slca.losses import policy_loss
from slca.rewards.preference import SummaryScorer, build_summary_scorer
from slca.rewards.score import RewardBreakdown, per_block_rewards, score_batch
from slca.rollout.engines import Engine, SamplingParams
from slca.rollout.loop import RolloutLimits, run_rollouts
from slca.rollout.types import Rollout
from slca.segments import head_masks, union_mask
from slca.simulator import Simulator
from slca.simulator.core import SimulatorStats
from slca.training.batch import Batch, collate, first_position, token_logprobs
from slca.training.diagnostics import step_diagnostics
from slca.training.engines import CLIENT_STATE, ENGINE_STATE, UpdateEngine, explain_oom


class Tracker(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...
    def log_histograms(self, step: int, values: dict[str, Any]) -> None: ...
    def log_checkpoint(self, path: Path, step: int) -> None: ...


PHASES: tuple[str, ...] = ("rollout", "score", "logprobs", "update", "backward", "optimizer")
"""The phases every step's metrics time, as ``perf/<phase>_s`` (seconds, this rank's):
``rollout`` (drawing tasks, syncing weights, sampling; the simulator included),
``score`` (HierR, the summary scorer included), ``logprobs`` (old and reference
log-probs), ``update`` (the policy update: forwards and loss, ``backward`` and
``optimizer``, which are also given on their own). On CUDA the backward pass runs
asynchronously, so its kernels are charged to the next phase that waits for them
(``optimizer``, whose gradient norm synchronises)."""


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
        algorithm = config.algorithm
        if algorithm.loss.kl_coef > 0 and reference is None:
            raise ValueError("algorithm.loss.kl_coef > 0 needs a frozen reference model")
        _check_data_parallel(config, update.world_size)
        if getattr(rollout_engine, "shares_module", False):
            if getattr(rollout_engine, "model", None) is not update.module:
                raise ValueError(
                    f"rollout engine {rollout_engine.name!r} declares shares_module but "
                    "does not generate with update.module; build it on update.module, or "
                    "give it a copy with shares_module=False"
                )
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
        while not self.done:
            self.end_step(self.train_step())
        return self.state

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
            started = time.perf_counter()
            metrics = {**metrics, **self.validate()}
            metrics["perf/validate_s"] = time.perf_counter() - started
        if self.tracker is not None:
            self.tracker.log_metrics(metrics, step=self.state.step)
        if self.progress is not None:
            self.progress(self.state.step, metrics)
        last = self.state.step == self.config.steps
        if last or self.state.step % self.config.checkpoint_every == 0:
            self.checkpoint()

    def _validation_due(self) -> bool:
        every = self.config.validation.every
        if not every or not self.validation_tasks:
            return False
        return self.state.step % every == 0 or self.state.step == self.config.steps

    def validate(self) -> dict[str, float]:
        """One greedy rollout per validation task with the current weights, scored
        against gold as ``evaluate`` scores the test split: ``val/<metric>`` (see
        :func:`slca.eval.in_domain.in_domain_metrics`). Changes no trainer state."""
        rollout = self.config.rollout
        self._sync_rollout_weights()
        world, rank = self.update.world_size, self.update.rank
        n = len(self.validation_tasks)
        first, last = n * rank // world, n * (rank + 1) // world  # this rank's share
        with self._generation():
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
        started = sampled.started
        step = self.state.step + 1
        # every rank holds the whole step (rank order = task order), and updates its rows
        parts = self._gather((sampled.rollouts, list(scores), sampled.simulator_stats))
        rollouts = [r for part in parts for r in part[0]]
        scores = [s for part in parts for s in part[1]]
        simulator_stats = _sum_stats([part[2] for part in parts])
        own = len(sampled.rollouts)
        rows = torch.arange(self.update.rank * own, (self.update.rank + 1) * own)
        batch = collate(rollouts, self.tokenizer.pad_token_id)
        masks = head_masks(
            batch.kind_codes, algorithm.segments.routing, mode=algorithm.segments.mode
        )
        loss_mask = union_mask(masks)
        with self._timed("logprobs"):
            old, ref = self._reference_logprobs(batch, rows)
        extra = {}
        if algorithm.advantage.granularity == "per_call":
            extra = {
                "call_rewards": _block_reward_matrix(rollouts, scores),
                "call_index": batch.call_index,
            }
        advantages, adv_metrics = compute_advantages(
            algorithm.advantage.estimator,
            rewards={
                "tool": torch.tensor([s.tool for s in scores]),
                "summary": torch.tensor([s.summary for s in scores]),
            },
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
        with self._timed("update"), explain_oom(cfg.update.micro_batch_size):
            actor = self._update(batch, rows, old, ref, advantages, loss_mask, step)
        if step % cfg.histogram_every == 0:
            cosine = self._gradient_cosine(batch, rows, old, advantages, masks)
            actor["actor/grad_cos_tool_sum"] = cosine  # rank 0's: the step's first rows
            if self.tracker is not None:
                self.tracker.log_histograms(
                    step, {head: advantages[mask].numpy() for head, mask in masks.items()}
                )
        self.state.step = step
        self.state.tasks_drawn += cfg.rollout.tasks_per_step
        elapsed = time.perf_counter() - started
        w = algorithm.advantage.weights
        totals = [w.get("tool", 1.0) * s.tool + w.get("summary", 1.0) * s.summary for s in scores]
        metrics = {
            "reward/tool": _mean(s.tool for s in scores),
            "reward/sum": _mean(s.summary for s in scores),
            "reward/total": _mean(totals),
            **step_diagnostics(rollouts, scores, totals, advantages, loss_mask),
            **{k: float(v) for k, v in adv_metrics.items()},
            **actor,
            "rollout/tool_calls_per_task": _mean(len(r.calls) for r in rollouts),
            "rollout/redundant_calls": _mean(
                s.duplicate_calls + s.unneeded_tool_calls + s.no_call_task_calls for s in scores
            ),
            "rollout/turns": _mean(len(r.turns) for r in rollouts),
            "rollout/policy_tokens": float(batch.policy_mask.sum()),
            "rollout/finished_frac": _mean(r.finish_reason == "stop" for r in rollouts),
            **simulator_stats.as_metrics(),
            **self.summary_scorer.metrics(),
            "perf/step_s": elapsed,
            **{f"perf/{phase}_s": self._phase_s.get(phase, 0.0) for phase in PHASES},
            "perf/rollout_s": sampled.rollout_s,
            "perf/tokens_per_s": batch.n_tokens / elapsed,
        }
        self._phase_s = {}
        return metrics

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

    def _gather(self, value: Any) -> list[Any]:
        """``value`` of every rank, in rank order (``[value]`` in one process)."""
        if self.update.world_size == 1:
            return [value]
        import torch.distributed as dist

        out: list[Any] = [None] * self.update.world_size
        dist.all_gather_object(out, value)
        return out

    @torch.no_grad()
    def _reference_logprobs(
        self, batch: Batch, rows: Tensor
    ) -> tuple[Tensor | None, Tensor | None]:
        """Old log-probs (None: on-policy, the live ones are the old ones) and the
        reference model's log-probs (None without a KL term), of this rank's ``rows``."""
        update = self.config.update
        temperature = self.config.rollout.temperature
        old = batch.old_logprobs
        model = self.update.model
        was_training = model.training
        model.eval()
        try:
            if update.recompute_old_logprobs:
                # One update per batch: every forward of the update runs before the
                # optimizer step, so its own (detached) log-probs are the old ones and
                # the extra pass (~15% of a CPU step) is skipped, as TRL does.
                single_update = update.epochs == 1 and update.minibatches == 1
                old = (
                    None
                    if single_update
                    else self._chunked_logprobs(model, batch, rows, temperature)
                )
            ref = None
            if self.reference is not None and self.config.algorithm.loss.kl_coef > 0:
                ref = self._chunked_logprobs(self.reference, batch, rows, temperature)
        finally:
            model.train(was_training)
        return old, ref

    def _chunked_logprobs(self, model, batch: Batch, rows: Tensor, temperature: float) -> Tensor:
        """``(B, T)`` log-probs of ``rows`` (zeros elsewhere), one micro-batch at a time."""
        out = torch.zeros_like(batch.old_logprobs)
        size = self.config.update.micro_batch_size
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            sub = batch.select(chunk).to(self.update.device)
            with self.update.autocast():
                logp, _ = token_logprobs(
                    model,
                    sub.input_ids,
                    sub.attention_mask,
                    temperature=temperature,
                    start=first_position(sub.policy_mask),
                )
            out[chunk, : logp.shape[1]] = logp.float().cpu()
        return out

    def _update(
        self,
        batch: Batch,
        rows: Tensor,
        old: Tensor | None,
        ref: Tensor | None,
        advantages: Tensor,
        loss_mask: Tensor,
        step: int,
    ) -> dict[str, float]:
        """The minibatch updates of this rank's ``rows``; metrics over every rank.

        Every rank splits its rows into ``update.minibatches`` with the same seeded
        permutation (verl's local shuffle), so the global minibatch is the union of the
        ranks' parts and every rank runs the same micro-batch plan. A micro-batch's loss
        is weighted by its share of the global minibatch's loss units (tokens for
        ``token-mean``, sequences for ``seq-mean-token-mean``), times the world size
        that the gradient average divides by: the gradient is the one-process one.
        A minibatch with a non-finite loss anywhere is skipped whole (see below).
        """
        cfg, loss_cfg = self.config, self.config.algorithm.loss
        model, device = self.update.model, self.update.device
        world = self.update.world_size
        model.train()
        own = len(rows)
        per_minibatch = own // cfg.update.minibatches
        size = cfg.update.micro_batch_size
        starts = torch.arange(world) * own  # each rank's first row (rank order = row order)
        by_sequence = loss_cfg.aggregation != "token-mean"  # the seq-mean-* modes

        def units(selected: Tensor) -> Tensor:
            """Loss units of each row of ``selected``."""
            counts = loss_mask[selected].sum(dim=1)
            return (counts > 0).long() if by_sequence else counts

        generator = torch.Generator().manual_seed(cfg.seed * 7_919 + step)
        totals: dict[str, float] = {}
        weight_sum = 0.0
        grad_norms = []
        gaps: list[tuple[float, float]] = []  # (log-prob gap, tokens) before any step
        for epoch in range(cfg.update.epochs):
            order = torch.randperm(own, generator=generator)
            for m in range(cfg.update.minibatches):
                positions = order[m * per_minibatch : (m + 1) * per_minibatch]
                # (world, rows) the global minibatch: every rank's rows at these positions
                everyone = starts[:, None] + positions[None, :]
                denominator = float(units(everyone.flatten()).sum())
                if denominator == 0:
                    continue
                plan = [  # micro-batches with a loss unit on some rank
                    s
                    for s in range(0, per_minibatch, size)
                    if units(everyone[:, s : s + size].flatten()).any()
                ]
                mine = rows[positions]
                self.update.zero_grad()
                running: dict[str, float] = {}
                weight = 0.0
                for position, s in enumerate(plan):
                    micro = mine[s : s + size]
                    boundary = position == len(plan) - 1
                    sub = batch.select(micro).to(device)
                    width = sub.input_ids.shape[1]
                    mask = loss_mask[micro, :width].to(device)
                    share = float(units(micro).sum()) / denominator
                    with self.update.micro_batch(boundary=boundary):
                        logp, entropy = token_logprobs(
                            model,
                            sub.input_ids,
                            sub.attention_mask,
                            temperature=cfg.rollout.temperature,
                            with_entropy=True,
                            start=first_position(mask),
                        )
                        loss, metrics = policy_loss(
                            logp,
                            logp.detach() if old is None else old[micro, :width].to(device),
                            advantages[micro, :width].to(device),
                            mask,
                            clip_low=loss_cfg.clip_low,
                            clip_high=loss_cfg.clip_high,
                            ref_logp=None if ref is None else ref[micro, :width].to(device),
                            kl_coef=loss_cfg.kl_coef,
                            aggregation=loss_cfg.aggregation,
                            clip_ratio_c=loss_cfg.clip_ratio_c,
                            norm_length=cfg.loss_norm_length,
                        )
                        if epoch == 0 and m == 0:  # before any optimizer step of this batch
                            gaps.append((_logprob_gap(logp, sub, mask), float(mask.sum())))
                        if not torch.isfinite(loss):
                            # NaN on every gradient: the step (every rank's, the norm is
                            # global) sees a non-finite norm and applies nothing, as the
                            # engines' overflow checks do; the micro-batches keep their
                            # lockstep, which DDP and DeepSpeed need.
                            loss = logp.sum() * float("nan")
                        # DeepSpeed reduces gradients at the last micro-batch of a minibatch.
                        with self._timed("backward"):
                            self.update.backward(loss * (share * world), boundary=boundary)
                    if share:
                        metrics["actor/entropy"] = entropy[mask].mean()
                        for key, value in metrics.items():
                            running[key] = running.get(key, 0.0) + share * float(value)
                        weight += share
                with self._timed("optimizer"):
                    grad_norm = self.update.step()
                if not math.isfinite(grad_norm):
                    self._skip_step()  # the whole minibatch: none of its metrics count
                    continue
                self.state.bad_steps = 0
                grad_norms.append(grad_norm)
                for key, value in running.items():
                    totals[key] = totals.get(key, 0.0) + value
                weight_sum += weight
        # shares are of the global minibatch: the ranks' sums are the global sums
        gathered = self._gather((totals, weight_sum, gaps))
        totals = {k: sum(part[0].get(k, 0.0) for part in gathered) for k in totals}
        weight_sum = sum(part[1] for part in gathered)
        gaps = [gap for part in gathered for gap in part[2]]  # over the global minibatch
        out = {k: v / weight_sum for k, v in totals.items()} if weight_sum else {}
        if grad_norms:
            out["actor/grad_norm"] = sum(grad_norms) / len(grad_norms)
        out["actor/lr"] = float(self.update.current_lr())
        if gaps:
            out["actor/rollout_logprob_diff"] = sum(g * w for g, w in gaps) / sum(
                w for _, w in gaps
            )
        out["actor/skipped_steps"] = float(self.state.skipped_steps)
        return out

    def _skip_step(self) -> None:
        self.update.zero_grad()
        self.state.bad_steps += 1
        self.state.skipped_steps += 1
        if self.state.bad_steps >= self.config.max_bad_steps:
            raise TrainingDiverged(
                f"{self.state.bad_steps} consecutive non-finite losses at step "
                f"{self.state.step + 1}; stopping with the last checkpoint in "
                f"{self.checkpoint_dir} intact"
            )

    def _gradient_cosine(
        self,
        batch: Batch,
        rows: Tensor,
        old: Tensor | None,
        advantages: Tensor,
        masks: dict[str, Tensor],
    ) -> float:
        """Cosine between the policy gradients of tool tokens and of summary tokens
        (the paper's orthogonality probe), on the first micro-batch of ``rows`` (rank
        0's are the step's first rows; every rank runs it, for ZeRO-3's collectives)."""
        if "tool" not in masks or "summary" not in masks:
            return float("nan")
        model, device = self.update.module, self.update.device  # no DDP/DeepSpeed hooks
        rows = rows[: self.config.update.micro_batch_size]
        sub = batch.select(rows).to(device)
        width = sub.input_ids.shape[1]
        params = [p for p in model.parameters() if p.requires_grad]
        grads, empty = [], False
        for head in ("tool", "summary"):
            mask = masks[head][rows, :width].to(device)
            # no early return: under ZeRO-3 every rank must run the same forwards
            empty = empty or not bool(mask.any())
            with self.update.autocast():
                logp, _ = token_logprobs(
                    model,
                    sub.input_ids,
                    sub.attention_mask,
                    temperature=self.config.rollout.temperature,
                    start=first_position(mask),
                )
            old_rows = logp.detach() if old is None else old[rows, :width].to(device)
            loss, _ = policy_loss(logp, old_rows, advantages[rows, :width].to(device), mask)
            grad = torch.autograd.grad(loss, params, allow_unused=True)
            grads.append(
                torch.cat(
                    [
                        (g if g is not None else torch.zeros_like(p)).flatten()
                        for g, p in zip(grad, params)
                    ]
                )
            )
        if empty:
            return float("nan")
        return float(torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0))

    # ------------------------------------------------------------------ checkpoints

    def checkpoint(self) -> Path:
        """Weights, optimizer, scheduler, RNG and trainer state under ``step_<k>``; the
        engine writes it beside the target and renames it, so it is complete or absent."""
        path = self.update.save(
            self.checkpoint_dir / f"step_{self.state.step:06d}", client_state=asdict(self.state)
        )
        if self.tracker is not None:
            self.tracker.log_checkpoint(path, self.state.step)
        return path

    def restore(self) -> bool:
        """Continue from the newest complete checkpoint; False when there is none."""
        latest = latest_checkpoint(self.checkpoint_dir)
        if latest is None:
            return False
        self.state = TrainerState(**self.update.load(latest))
        return True


def read_client_state(checkpoint: Path) -> dict[str, Any]:
    """The trainer state a checkpoint carries (step, data cursor, run id)."""
    return json.loads((checkpoint / CLIENT_STATE).read_text())


def complete_checkpoints(directory: str | Path) -> list[Path]:
    """Every complete ``step_*`` checkpoint, oldest first (the engine writes its state
    file last, in a directory it renames into place)."""
    return sorted(
        p
        for p in Path(directory).glob("step_*")
        if (p / ENGINE_STATE).exists() and (p / CLIENT_STATE).exists()
    )


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete ``step_*`` checkpoint."""
    done = complete_checkpoints(directory)
    return done[-1] if done else None


def _block_reward_matrix(rollouts, scores) -> Tensor:
    per_block = [per_block_rewards(r, s) for r, s in zip(rollouts, scores, strict=True)]
    width = max((len(b) for b in per_block), default=0)
    out = torch.full((len(per_block), max(width, 1)), math.nan)
    for i, rewards in enumerate(per_block):
        out[i, : len(rewards)] = torch.tensor(rewards)
    return out


def _check_data_parallel(config: TrainConfig, world: int) -> None:
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


def _sum_stats(parts: Sequence[SimulatorStats]) -> SimulatorStats:
    return SimulatorStats(
        **{f.name: sum(getattr(p, f.name) for p in parts) for f in fields(SimulatorStats)}
    )


def _logprob_gap(logp: Tensor, sub: Batch, mask: Tensor) -> float:
    """Mean |trainer log-prob − sampling engine's log-prob| over ``mask``: ~0 when the
    trainer scores tokens as the engine sampled them (same weights, temperature and
    masking); a gap makes the PPO ratio of a reused batch wrong."""
    engine = sub.old_logprobs.to(logp.device)
    return float((logp.detach() - engine)[mask].abs().mean())


def _mean(values) -> float:
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else 0.0
