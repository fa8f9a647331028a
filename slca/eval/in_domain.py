"""In-domain metrics on the held-out test split, from HierR process-mode breakdowns.

Evaluation always scores against the gold calls (process mode), whatever reward the
run trained on, so runs with different training rewards compare on one scale.
"""

from __future__ import annotations

from collections.abc import Sequence

from slca.rewards.score import RewardBreakdown

#: A task succeeds when its process score (R_tool in process mode: the weighted parts
#: minus the redundancy penalty, clipped to [0, 1]) reaches this threshold (the paper's
#: Success@0.9).
SUCCESS_THRESHOLD = 0.9
#: Float slack for the comparison: the default weights of every part but format sum to
#: 0.8999999999999999, so "all but format perfect" would otherwise miss the bar.
TOLERANCE = 1e-9

PREFIX = "in_domain"


def in_domain_metrics(
    breakdowns: Sequence[RewardBreakdown], *, too_long: int = 0
) -> dict[str, float]:
    """Means over one greedy rollout per task; keys ``in_domain/<metric>``.

    - ``success_at_0.9``: tasks whose process score is >= 0.9, out of every task drawn:
      the ``too_long`` tasks whose prompt did not fit the context count as failures
      (the overall); the other means describe the ``tasks`` that ran;
    - ``process``: mean process score; ``name_f1``, ``key``, ``value``, ``format``:
      its parts (name F1 is the multiset F1 of tool names against the gold);
    - ``summary``: the summary scorer's score (0 when there is no final answer, or
      when a call-needing task made no call: nothing was grounded);
    - ``tool_calls_per_task`` and ``redundant_calls_per_task``;
    - ``no_call_accuracy``: among tasks whose gold has no call, those answered
      without any call block (absent when the set has no such task).
    """
    if too_long < 0:
        raise ValueError(f"in_domain_metrics: too_long must be >= 0; got {too_long}")
    if not breakdowns:
        if too_long:  # nothing fitted: every task drawn failed
            return {f"{PREFIX}/success_at_0.9": 0.0, f"{PREFIX}/tasks": 0.0}
        raise ValueError("in_domain_metrics: no rollouts to score")
    if any(b.mode != "process" for b in breakdowns):
        raise ValueError("in_domain_metrics needs process-mode breakdowns (scored against gold)")
    n = len(breakdowns)

    def mean(values) -> float:
        return sum(float(v) for v in values) / n

    out = {
        "success_at_0.9": sum(b.tool >= SUCCESS_THRESHOLD - TOLERANCE for b in breakdowns)
        / (n + too_long),
        "process": mean(b.tool for b in breakdowns),
        "name_f1": mean(b.name for b in breakdowns),
        "key": mean(b.key for b in breakdowns),
        "value": mean(b.value for b in breakdowns),
        "format": mean(b.format for b in breakdowns),
        "summary": mean(b.summary_raw or 0.0 for b in breakdowns),
        "tool_calls_per_task": mean(b.n_calls for b in breakdowns),
        "redundant_calls_per_task": mean(b.redundant_calls for b in breakdowns),
        "tasks": float(n),
    }
    no_call = [b for b in breakdowns if not b.needs_call]
    if no_call:
        out["no_call_accuracy"] = sum(b.n_blocks == 0 for b in no_call) / len(no_call)
    return {f"{PREFIX}/{k}": v for k, v in out.items()}
