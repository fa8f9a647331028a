"""What a rollout records: one task, one sampled trajectory, every token labelled.

The rollout loop produces :class:`Rollout` s; the reward layer scores them
(``slca.rewards.score``); the trainer turns their token arrays into tensors.
All per-token lists have the length of ``token_ids``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from slca.grammar import ParsedTurn

FinishReason = Literal["stop", "max_turns", "max_tokens", "max_bytes"]


@dataclass(frozen=True)
class ExecutedCall:
    """A call the policy made and what the simulator answered.

    ``index`` counts calls over the whole trajectory (0, 1, …); ``turn`` is the
    policy turn that made it; ``step`` counts turns that made at least one call (a
    parallel step is one turn); ``block`` counts ``<tool_call>`` blocks over the
    trajectory and is the ``call_index`` the block's tokens carry (a JSON list in
    one block is several calls sharing one block's tokens).
    """

    index: int
    turn: int
    step: int
    name: str
    arguments: dict[str, Any]
    response: Any
    block: int = -1


@dataclass(frozen=True)
class Turn:
    """One policy turn: its text, its parse, and where its tokens lie in the trajectory."""

    text: str
    parsed: ParsedTurn
    final: bool
    token_start: int
    token_end: int
    user_turn: int = 0
    """The user turn it answers (0 but for tasks with later user turns)."""


@dataclass
class Rollout:
    """One sampled trajectory of one task.

    ``token_ids`` is the whole sequence (prompt, policy turns, environment tokens:
    tool responses and template text); ``policy_mask`` marks the tokens the policy
    sampled, ``logprobs`` their log-probabilities under the sampling policy (0
    elsewhere), ``kind_codes`` their segment kind (:data:`slca.segments.KIND_CODE`,
    ``ENV`` = -1 elsewhere) and ``call_index`` the call block each belongs to over
    the trajectory (-1 if none; see :class:`ExecutedCall`).
    """

    task_id: str
    group: int
    sample: int
    prompt_length: int
    token_ids: list[int] = field(default_factory=list)
    policy_mask: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    kind_codes: list[int] = field(default_factory=list)
    call_index: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    calls: list[ExecutedCall] = field(default_factory=list)
    finish_reason: FinishReason = "stop"

    @property
    def final_turn(self) -> Turn | None:
        """The turn that answered the user (no call block), if the rollout got there."""
        return self.turns[-1] if self.turns and self.turns[-1].final else None

    @property
    def summary(self) -> str:
        """The user-facing answer: the final turn's plain text ('' when there is none)."""
        final = self.final_turn
        return final.parsed.content if final is not None else ""

    @property
    def n_policy_tokens(self) -> int:
        return sum(self.policy_mask)


TRUNCATED: tuple[FinishReason, ...] = ("max_tokens", "max_bytes")
"""Finish reasons of a rollout cut off by a length limit (``max_turns`` is not one:
the policy ended every turn, it just never stopped calling tools)."""


def is_truncated(rollout: Rollout) -> bool:
    """Cut off by a length limit before the policy ended its turn."""
    return rollout.finish_reason in TRUNCATED
