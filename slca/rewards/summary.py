"""What every summary scorer shares: its input, its interface, the factory that builds
one by name (:mod:`slca.rewards.scorers`), and text cleaning."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slca.data.record import TaskRecord
from slca.rewards.scorers import SUMMARY_SCORERS
from slca.rollout.types import Rollout
from slca.simulator.core import is_error

if TYPE_CHECKING:
    from slca.config.rewards import SummaryConfig

Generate = Callable[[list[str]], list[str]]
"""An engine-agnostic text generator: one completion per prompt, in order."""


@dataclass(frozen=True)
class SummaryInput:
    """What a summary scorer sees: the answer, the task, and every tool response in order."""

    summary: str
    task: TaskRecord
    responses: tuple[Any, ...] = ()

    @classmethod
    def from_rollout(cls, rollout: Rollout, task: TaskRecord) -> SummaryInput:
        calls = sorted(rollout.calls, key=lambda c: c.index)
        return cls(rollout.summary, task, tuple(c.response for c in calls))

    @property
    def successes(self) -> list[Any]:
        return [r for r in self.responses if not is_error(r)]


class SummaryScorer(ABC):
    """Scores summaries in [0, 1] (``reward_model`` with ``transform: identity`` excepted)."""

    @abstractmethod
    def score_batch(self, items: Sequence[SummaryInput]) -> list[float]: ...

    def metrics(self) -> dict[str, float]:
        """Counters since construction (e.g. ``judge/failures``)."""
        return {}


def build_summary_scorer(config: SummaryConfig, *, generate: Generate | None = None):
    """The scorer ``config.name`` names, built from its settings."""
    return SUMMARY_SCORERS.get(config.name)(config, generate=generate)


def clean_text(text: str) -> str:
    """Text that encodes as UTF-8: lone surrogates (invalid bytes decoded with
    ``surrogateescape``) become ``?``, so tokenizers and engines never choke on it."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
