"""The summary-scorer registry: name → factory of an ``R_summary`` scorer.

The configuration (:class:`slca.config.rewards.SummaryConfig`) validates a scorer's name
against :data:`slca.config.names.SUMMARY_SCORER_NAMES`, which this registry keeps up to
date. Importing this module runs :mod:`slca.rewards`'s ``__init__`` first, which
registers the built-in scorers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slca.config.names import SUMMARY_SCORER_NAMES
from slca.registry import Registry

Factory = Callable[..., Any]
"""``factory(config: SummaryConfig, *, generate=None) -> SummaryScorer``."""

SUMMARY_SCORERS: Registry[Factory] = Registry("summary scorer", names=SUMMARY_SCORER_NAMES)


def register_summary_scorer(name: str) -> Callable[[Factory], Factory]:
    """Register ``factory(config: SummaryConfig, *, generate=None)`` under ``name``."""
    return SUMMARY_SCORERS.register(name)


def available_summary_scorers() -> list[str]:
    return SUMMARY_SCORERS.names()
