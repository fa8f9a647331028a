"""The summary-scorer registry: name → factory of an ``R_summary`` scorer.

Apart from the scorers (:mod:`slca.rewards.preference`), so that the configuration
(:class:`slca.config.rewards.SummaryConfig`) validates a scorer's name without importing
them. The built-in scorers register when :mod:`slca.rewards` is imported, which any
import of one of its modules does first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slca.registry import Registry

Factory = Callable[..., Any]
"""``factory(config: SummaryConfig, *, generate=None) -> SummaryScorer``."""

SUMMARY_SCORERS: Registry[Factory] = Registry("summary scorer")


def register_summary_scorer(name: str) -> Callable[[Factory], Factory]:
    """Register ``factory(config: SummaryConfig, *, generate=None)`` under ``name``."""
    return SUMMARY_SCORERS.register(name)


def available_summary_scorers() -> list[str]:
    return SUMMARY_SCORERS.names()
