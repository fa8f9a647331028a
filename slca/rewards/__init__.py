"""The reward layer (DESIGN §4): HierR ``R_tool`` (process or execution) and ``R_summary``.

Score rollouts with :func:`slca.rewards.score.score` / :func:`~slca.rewards.score.score_batch`
and a :class:`slca.config.rewards.RewardConfig`; the parts live in ``process``,
``execution``, ``redundancy`` and ``preference``.

The package itself holds the summary-scorer side only: importing it registers the
built-in scorers, so the configuration (which validates a scorer's name against the
registry) imports it without importing itself back (these scorer modules read their
settings' types for annotations only).
"""

from slca.rewards.preference import SummaryInput, SummaryScorer, build_summary_scorer
from slca.rewards.scorers import available_summary_scorers, register_summary_scorer

__all__ = [
    "SummaryInput",
    "SummaryScorer",
    "available_summary_scorers",
    "build_summary_scorer",
    "register_summary_scorer",
]
