"""Redundant behaviour in one rollout: counted, and penalised in R_tool.

Each policy call is counted under at most one reason, checked in this order:

- ``no_call_task``: any call on a task whose gold is empty;
- ``duplicate``: the same name and canonical arguments as an earlier call of the
  rollout (the first occurrence is not redundant);
- ``unneeded_tool``: a tool that no gold step uses (unknown tools included).

``extra_steps`` counts calling turns beyond the gold number of steps (not on no-call
tasks, where the calls are already counted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slca.config.rewards import RedundancyConfig
from slca.data.record import TaskRecord
from slca.rewards.match import PolicyCall, canonical


@dataclass(frozen=True)
class Redundancy:
    duplicate: int = 0
    unneeded_tool: int = 0
    no_call_task: int = 0
    extra_steps: int = 0

    @property
    def calls(self) -> int:
        """Redundant calls, all reasons together (``rollout/redundant_calls``)."""
        return self.duplicate + self.unneeded_tool + self.no_call_task

    def penalty(self, config: RedundancyConfig) -> float:
        return config.per_call * self.calls + config.per_extra_step * self.extra_steps


def duplicate_flags(calls: Sequence[PolicyCall]) -> list[bool]:
    """True for every call that repeats an earlier one (same name, canonical arguments)."""
    seen: set[tuple[str, str]] = set()
    flags = []
    for call in calls:
        key = (call.name, canonical(call.arguments))
        flags.append(key in seen)
        seen.add(key)
    return flags


def count_redundancy(calls: Sequence[PolicyCall], task: TaskRecord) -> Redundancy:
    if not task.gold:
        return Redundancy(no_call_task=len(calls))
    gold_tools = {c.name for step in task.gold for c in step}
    duplicate = unneeded = 0
    for call, repeated in zip(calls, duplicate_flags(calls)):
        if repeated:
            duplicate += 1
        elif call.name not in gold_tools:
            unneeded += 1
    steps = len({c.step for c in calls})
    return Redundancy(
        duplicate=duplicate,
        unneeded_tool=unneeded,
        extra_steps=max(0, steps - len(task.gold)),
    )
