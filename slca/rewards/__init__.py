"""The reward layer (DESIGN §4): HierR ``R_tool`` (process or execution) and ``R_summary``.

Use :func:`score` / :func:`score_batch` with a :class:`RewardConfig`; the parts live in
``process``, ``execution``, ``redundancy`` and ``preference``.
"""

from slca.config.rewards import RewardConfig
from slca.rewards.preference import SummaryInput, SummaryScorer, build_summary_scorer
from slca.rewards.score import RewardBreakdown, batch_metrics, score, score_batch
from slca.rewards.scorers import available_summary_scorers, register_summary_scorer

__all__ = [
    "RewardBreakdown",
    "RewardConfig",
    "SummaryInput",
    "SummaryScorer",
    "available_summary_scorers",
    "batch_metrics",
    "build_summary_scorer",
    "register_summary_scorer",
    "score",
    "score_batch",
]
