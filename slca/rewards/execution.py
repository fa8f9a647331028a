"""The gold-free ``execution`` mode of R_tool: what the simulator made of the calls.

Parts, each in [0, 1]:

- ``format``: valid call blocks / call blocks (as in the process reward);
- ``success``: executed calls whose response is not an error object / executed calls.
  The simulator validates every response against the tool's response schema and
  replaces an invalid one by an error object (DESIGN §5), so a non-error response is
  a schema-valid success;
- ``unique``: executed calls that repeat no earlier call (same name, same canonical
  arguments) / executed calls.

Without executed calls, ``success`` and ``unique`` are 1 on a no-call task and 0 when
the task needs a call: the only bit of gold this mode reads is whether a call is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slca.config.rewards import ExecutionWeights
from slca.rewards.match import canonical
from slca.rollout.types import ExecutedCall
from slca.simulator.core import is_error


@dataclass(frozen=True)
class ExecutionParts:
    format: float
    success: float
    unique: float

    def weighted(self, w: ExecutionWeights) -> float:
        return w.format * self.format + w.success * self.success + w.unique * self.unique


def executed_in_order(calls: Sequence[ExecutedCall]) -> list[ExecutedCall]:
    return sorted(calls, key=lambda c: c.index)


def execution_flags(calls: Sequence[ExecutedCall]) -> list[tuple[bool, bool]]:
    """(succeeded, repeats an earlier call) for each executed call, in index order."""
    seen: set[tuple[str, str]] = set()
    flags = []
    for call in executed_in_order(calls):
        key = (call.name, canonical(call.arguments))
        flags.append((not is_error(call.response), key in seen))
        seen.add(key)
    return flags


def execution_parts(
    calls: Sequence[ExecutedCall], format_score: float, needs_call: bool
) -> ExecutionParts:
    flags = execution_flags(calls)
    if not flags:
        empty = 0.0 if needs_call else 1.0
        return ExecutionParts(format_score, empty, empty)
    n = len(flags)
    success = sum(ok for ok, _ in flags) / n
    unique = sum(not repeated for _, repeated in flags) / n
    return ExecutionParts(format_score, success, unique)


def execution_per_call(calls: Sequence[ExecutedCall]) -> list[float]:
    """Per-call reward in execution mode: 1 for a success that repeats no earlier call."""
    return [float(ok and not repeated) for ok, repeated in execution_flags(calls)]
