"""Learning diagnostics of one RL step: what the update was made of.

Pure functions of a step's rollouts, rewards and advantages; the trainer logs their
output beside its other metrics. They answer the questions a run that does not learn
raises: are rollouts cut off, and what do cut-off rollouts score against finished ones
(nothing rewards stopping unless the reward reads ``finish_reason``); which HierR part
moves; where the advantage mass lands (under a token-mean loss a long rollout with
a negative advantage outweighs a short one with a positive advantage, and a negative
mean per-token advantage pushes every sampled token down, which raises entropy); and
how many rollouts each reward head reaches at all (segment statistics are present-only,
DESIGN §2: a rollout that omits a segment, say one that never writes a final answer,
has that head's reward dropped, so nothing prices the omission on that head).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from slca.advantages import metric_name
from slca.rewards.score import RewardBreakdown
from slca.rollout.types import Rollout, is_truncated

PARTS = ("format", "name", "key", "value", "parallel")
"""The HierR process parts, logged as ``reward/<part>`` every step."""


def step_diagnostics(
    rollouts: Sequence[Rollout],
    scores: Sequence[RewardBreakdown],
    totals: Sequence[float],
    advantages: Tensor,
    loss_mask: Tensor,
    head_masks: Mapping[str, Tensor] | None = None,
    head_rewards: Mapping[str, Tensor] | None = None,
) -> dict[str, float]:
    """Per-step diagnostics (keys namespaced like DESIGN §8).

    Args:
        rollouts, scores: the step's B rollouts and their HierR breakdowns, in order.
        totals: ``(B,)`` the scalar reward each rollout was judged by (``reward/total``).
        advantages: ``(B, T)`` per-token advantages.
        loss_mask: ``(B, T)`` bool, the tokens that carry loss.
        head_masks: head → ``(B, T)`` bool, the tokens each reward head trains
            (what the estimator was given); None: no segment figures.
        head_rewards: head → ``(B,)`` that head's reward (the estimator's ``rewards``).

    Returns:
        - ``rollout/response_tokens_mean|max``: policy tokens per rollout;
        - ``rollout/truncated_frac``: rollouts cut off by a length limit
          (``max_tokens``/``max_bytes``) rather than ending or running out of turns;
        - ``reward/<part>`` for each HierR process part;
        - ``reward/total_finished``, ``reward/total_truncated`` (present only when the
          step has such rollouts), and the same for ``rollout/response_tokens``;
        - ``adv/token_mean``: mean advantage over loss tokens (what a token-mean loss
          weighs; 0 for equal-length rollouts, negative when long rollouts fare worse);
        - ``adv/truncated_token_share``: share of the loss tokens that lie in truncated
          rollouts; ``adv/truncated_mean``: their mean advantage;
        - per head (``summary`` named ``sum``, as in ``adv/``):
          ``segment/<head>_present_frac``, the share of rollouts with at least one token
          on that head, and ``segment/<head>_absent_reward``, the mean reward of the
          rollouts without one (present only when the step has such rollouts; with
          ``head_rewards``): the reward a present-only estimator ignores.
    """
    if not (len(rollouts) == len(scores) == len(totals) == advantages.shape[0]):
        raise ValueError(
            f"{len(rollouts)} rollouts, {len(scores)} scores, {len(totals)} totals and "
            f"{advantages.shape[0]} advantage rows must agree"
        )
    n = len(rollouts)
    if n == 0:
        return {}
    lengths = [float(r.n_policy_tokens) for r in rollouts]
    truncated = [is_truncated(r) for r in rollouts]
    out = {
        "rollout/response_tokens_mean": sum(lengths) / n,
        "rollout/response_tokens_max": max(lengths),
        "rollout/truncated_frac": sum(truncated) / n,
        **{f"reward/{p}": sum(float(getattr(s, p)) for s in scores) / n for p in PARTS},
    }
    for label, wanted in (("finished", False), ("truncated", True)):
        rows = [i for i in range(n) if truncated[i] == wanted]
        if rows:
            out[f"reward/total_{label}"] = sum(totals[i] for i in rows) / len(rows)
            out[f"rollout/response_tokens_{label}"] = sum(lengths[i] for i in rows) / len(rows)
    mask = loss_mask.bool()
    tokens = mask.sum()
    if tokens > 0:
        out["adv/token_mean"] = float(advantages[mask].mean())
        cut = torch.tensor(truncated, dtype=torch.bool)[:, None] & mask
        out["adv/truncated_token_share"] = float(cut.sum() / tokens)
        if cut.any():
            out["adv/truncated_mean"] = float(advantages[cut].mean())
    for head, head_mask in (head_masks or {}).items():
        name = metric_name(head)
        present = head_mask.bool().any(dim=1)
        out[f"segment/{name}_present_frac"] = float(present.float().mean())
        if head_rewards is not None and head in head_rewards and not present.all():
            out[f"segment/{name}_absent_reward"] = float(head_rewards[head][~present].mean())
    return out
