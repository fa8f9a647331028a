"""A finished RL step's metrics, in the order they are logged: the rewards, the step's
diagnostics (:mod:`slca.training.diagnostics`), the estimator's and the update's
figures, the rollouts', the simulator's and the summary scorer's counters, then the
timings. The trainer (:mod:`slca.training.rl`) gathers the parts; this only assembles."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from torch import Tensor

from slca.rewards.score import RewardBreakdown
from slca.rollout.types import Rollout
from slca.training.batch import Batch
from slca.training.diagnostics import step_diagnostics


def step_metrics(
    rollouts: Sequence[Rollout],
    scores: Sequence[RewardBreakdown],
    batch: Batch,
    credit: tuple[Tensor, Tensor, dict[str, Tensor], dict[str, Tensor]],
    *,
    weights: Mapping[str, float],
    sections: Sequence[Mapping[str, Any]],
    perf: Mapping[str, float],
) -> dict[str, float]:
    """The step's metrics over the whole step (every rank's rollouts): ``reward/*``
    (``reward/total`` weighs the heads by the estimator's ``weights``), the
    diagnostics of ``credit`` (``(advantages, loss_mask, head masks, head rewards)``,
    ``(B, T)`` tensors and ``(B,)`` rewards), ``sections`` in order (the estimator's
    metrics, ``actor/*``, ``simulator/*``, the scorer's) around ``rollout/*``, then
    ``perf``."""
    advantages, loss_mask, masks, head_rewards = credit
    estimator_metrics, actor, simulator, scorer = sections
    totals = [
        weights.get("tool", 1.0) * s.tool + weights.get("summary", 1.0) * s.summary for s in scores
    ]
    return {
        "reward/tool": mean(s.tool for s in scores),
        "reward/sum": mean(s.summary for s in scores),
        "reward/total": mean(totals),
        **step_diagnostics(rollouts, scores, totals, advantages, loss_mask, masks, head_rewards),
        **{k: float(v) for k, v in estimator_metrics.items()},
        **actor,
        "rollout/tool_calls_per_task": mean(len(r.calls) for r in rollouts),
        "rollout/redundant_calls": mean(
            s.duplicate_calls + s.unneeded_tool_calls + s.no_call_task_calls for s in scores
        ),
        "rollout/turns": mean(len(r.turns) for r in rollouts),
        "rollout/policy_tokens": float(batch.policy_mask.sum()),
        "rollout/finished_frac": mean(r.finish_reason == "stop" for r in rollouts),
        **simulator,
        **scorer,
        **perf,
    }


def mean(values: Iterable[Any]) -> float:
    """The mean of ``values`` as floats; 0.0 for none."""
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else 0.0
