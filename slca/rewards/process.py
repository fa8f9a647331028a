"""HierR process reward ``R_tool``: how the policy's calls compare with the gold calls.

Five parts, each in [0, 1] (DESIGN §4):

- ``format``: valid call blocks / call blocks over all policy turns. With no block at
  all: 1 on a no-call task (nothing was malformed, nothing was needed), 0 when the
  task needs a call.
- ``name``: multiset F1 of the called tool names against the gold names (all steps
  flattened); 1 when both are empty.
- ``key``: argument-key Jaccard of each gold call with its matched policy call,
  averaged over gold calls (an unmatched gold call scores 0); optional BFCL keys
  count only when used. On a no-call task: 1 without calls, else 0.
- ``value``: loosely equal argument values / gold keys (an unmatched gold call's keys
  miss; a keyless gold call counts as one key, hit when matched). On a no-call task:
  1 without calls, else 0.
- ``parallel``: the first calling turn has as many calls as the first gold step. On a
  no-call task: 1 without calls, else 0.

A gold call whose arguments the source does not give (``arguments_known`` false: the
authors' verl data names tools only) counts for ``name`` and ``parallel`` but not for
``key`` and ``value``. When no gold call of a task has known arguments, those two parts
are reported as 1 and left out of the weighted sum, whose other weights are scaled up to
the same total (a perfect rollout still scores the full weight; nothing is credited or
charged for arguments nobody knows). The ``reference`` profile keeps the authors' rule
instead (key and value 1 when calls were made).

Calls are matched greedily (:func:`slca.rewards.match.match_calls`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from slca.config.rewards import ProcessWeights
from slca.data.record import TaskRecord
from slca.rewards.match import GoldCall, Pair, PolicyCall
from slca.rollout.types import Rollout


@dataclass(frozen=True)
class ProcessParts:
    format: float
    name: float
    key: float
    value: float
    parallel: float
    arguments_scored: bool = True
    """False when no gold call has known arguments: key and value are not scored."""

    def weighted(self, w: ProcessWeights) -> float:
        shown = w.format * self.format + w.name * self.name + w.parallel * self.parallel
        if not self.arguments_scored:
            rest = w.format + w.name + w.parallel
            total = rest + w.key + w.value
            return shown * total / rest if rest > 0 else total
        return shown + w.key * self.key + w.value * self.value


def block_counts(rollout: Rollout) -> tuple[int, int]:
    """(valid call blocks, call blocks) over all policy turns."""
    blocks = [b for turn in rollout.turns for b in turn.parsed.blocks]
    return sum(b.ok for b in blocks), len(blocks)


def format_score(valid: int, total: int, needs_call: bool) -> float:
    if total == 0:
        return 0.0 if needs_call else 1.0
    return valid / total


def name_f1(predicted: Sequence[str], gold: Sequence[str]) -> float:
    """Multiset F1; 1 when both are empty, 0 when exactly one is."""
    if not predicted and not gold:
        return 1.0
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def parallel_score(calls: Sequence[PolicyCall], task: TaskRecord) -> float:
    if not task.gold:
        return 0.0 if calls else 1.0
    if not calls:
        return 0.0
    first = calls[0].step
    return float(sum(c.step == first for c in calls) == len(task.gold[0]))


def process_parts(
    rollout: Rollout,
    task: TaskRecord,
    calls: Sequence[PolicyCall],
    golds: Sequence[GoldCall],
    pairs: Sequence[Pair],
) -> ProcessParts:
    valid, total = block_counts(rollout)
    fmt = format_score(valid, total, needs_call=bool(task.gold))
    name = name_f1([c.name for c in calls], [g.name for g in golds])
    parallel = parallel_score(calls, task)
    if not golds:
        empty = 0.0 if calls else 1.0
        return ProcessParts(fmt, name, empty, empty, parallel)
    known = [g for g in golds if g.call.arguments_known]
    if not known:
        return ProcessParts(fmt, name, 1.0, 1.0, parallel, arguments_scored=False)
    scored = [p for p in pairs if p.gold.call.arguments_known]
    key = sum(p.key for p in scored) / len(known)
    value_total = sum(max(1, len(g.keys)) for g in known)
    value = sum(p.value_hits for p in scored) / value_total
    return ProcessParts(fmt, name, key, value, parallel)


def call_correctness(pair: Pair | None, w: ProcessWeights) -> float:
    """Per-call reward of one call: name, key and value against its matched gold call,
    weighted like R_tool's parts and renormalised to [0, 1]; 0 when unmatched."""
    if pair is None:
        return 0.0
    if not pair.gold.call.arguments_known:
        return 1.0
    total = w.name + w.key + w.value
    if total <= 0:
        return 1.0
    return (w.name + w.key * pair.key + w.value * pair.value) / total
