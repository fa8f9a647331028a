"""One entry point for the reward layer: a rollout and its task in, HierR out.

``score(rollout, task, config)`` composes, in this order:

1. the policy's calls (the parse of every turn) and the gold calls, matched greedily;
2. ``R_tool`` before clipping: the weighted process parts (``mode: process``) or
   execution parts (``mode: execution``), minus the redundancy penalty;
3. the omission guard: if the task needs a call and no parseable call exists, or
   ``R_tool`` before clipping is negative, ``R_tool = 0`` and ``R_summary =
   guard.penalty``, whatever the summary says (the summary scorer is not asked);
4. otherwise ``R_tool`` clipped to [0, 1] and ``R_summary`` from the configured
   scorer (an empty summary scores 0 without asking it), or ``-truncation.penalty``
   when that is set and a length limit cut the rollout off (its answer never ended);
   with ``truncation.head: tool`` (or ``cut``, when the limit cut a call turn) the
   penalty lowers R_tool instead (not below 0) and R_summary is scored as for a
   finished rollout;
5. ``per_call``: one reward per executed call, in ``ExecutedCall.index`` order.
   Process mode: the call's name, key and value scores against the gold call it was
   matched to (weighted like R_tool's parts, renormalised; 0 when it matched none,
   e.g. a duplicate or an unneeded call). Execution mode: 1 for a non-error response
   that repeats no earlier call, else 0. All 0 when the guard applies.

``mode: reference`` is the authors' reward (:mod:`slca.rewards.reference`): R_tool is
their process score of the trajectory text; the guard fires when the task needs a call
and the text has no ``<tool_call>`` tag; R_summary is 0 without asking the scorer when
no tool response reached the policy or the answer is shorter than 10 characters; and a
negative total (R_tool + R_summary) is routed to R_summary as their estimator does.
Per-call rewards are not defined (all 0).

Nothing here raises on any model output: malformed text is scored, not rejected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from slca.config.rewards import RewardConfig, TruncationConfig
from slca.data.record import TaskRecord
from slca.rewards.execution import (
    ExecutionParts,
    executed_in_order,
    execution_parts,
    execution_per_call,
)
from slca.rewards.match import gold_calls, label_tools, match_calls, policy_calls
from slca.rewards.preference import (
    Generate,
    SummaryInput,
    SummaryScorer,
    build_summary_scorer,
)
from slca.rewards.process import block_counts, call_correctness, format_score, process_parts
from slca.rewards.redundancy import Redundancy, count_redundancy
from slca.rewards.reference import gold_json, reference_text, route_penalty, score_text
from slca.rollout.types import Rollout, is_truncated

DEFAULT_CONFIG = RewardConfig()


@dataclass(frozen=True)
class RewardBreakdown:
    """HierR rewards of one rollout and everything they were made of."""

    tool: float
    """R_tool in [0, 1] (0 when the guard applies)."""
    summary: float
    """R_summary: the scorer's score, or the guard penalty."""
    mode: str
    """``process`` or ``execution``: which parts made R_tool."""
    tool_raw: float
    """R_tool before clipping and guard: weighted parts minus the redundancy penalty."""
    format: float
    name: float
    key: float
    value: float
    parallel: float
    """The five process parts (always computed; they weigh into R_tool in process mode)."""
    success: float
    unique: float
    """Execution parts (always computed; they weigh into R_tool in execution mode)."""
    duplicate_calls: int
    unneeded_tool_calls: int
    no_call_task_calls: int
    extra_steps: int
    redundancy_penalty: float
    """What was subtracted from the weighted parts."""
    n_calls: int
    """Parseable calls the policy wrote."""
    n_blocks: int
    n_valid_blocks: int
    needs_call: bool
    """The task's gold has at least one call."""
    has_call: bool
    """At least one parseable call exists."""
    guard_applied: bool
    summary_raw: float | None
    """The scorer's score before the guard; None when it was not asked."""
    per_call: tuple[float, ...]
    """One reward per executed call, in ``ExecutedCall.index`` order."""
    truncated: bool = False
    """A length limit cut the rollout off before the policy ended its turn."""

    @property
    def redundant_calls(self) -> int:
        return self.duplicate_calls + self.unneeded_tool_calls + self.no_call_task_calls

    def as_dict(self) -> dict:
        return {**asdict(self), "redundant_calls": self.redundant_calls}


@dataclass(frozen=True)
class ToolSide:
    """Everything about a rollout except its summary score."""

    fields: dict
    needs_call: bool
    guard: bool
    ask_summary: bool = True
    """The summary scorer may be asked (``reference``: a tool response reached the
    policy and the answer has at least 10 characters)."""


def tool_side(rollout: Rollout, task: TaskRecord, config: RewardConfig) -> ToolSide:
    """One rollout's score without its summary part (what ``score_batch`` computes for
    each rollout before the summary scorer is asked)."""
    if config.mode == "reference":
        return _reference_side(rollout, task, config)
    calls = policy_calls(rollout)
    golds = gold_calls(task)
    pairs = match_calls(calls, golds, label_tools(task))
    parts = process_parts(rollout, task, calls, golds, pairs)
    redundancy = count_redundancy(calls, task)
    needs_call = bool(task.gold)
    valid, total = block_counts(rollout)
    executed = executed_in_order(rollout.calls)
    exec_parts = execution_parts(executed, format_score(valid, total, needs_call), needs_call)

    if config.mode == "process":
        penalty = redundancy.penalty(config.redundancy)
        raw = parts.weighted(config.process) - penalty
        by_executed = {p.pred.executed: p for p in pairs if p.pred.executed is not None}
        per_call = [call_correctness(by_executed.get(c.index), config.process) for c in executed]
    else:
        penalty = config.redundancy.per_call * redundancy.no_call_task
        raw = exec_parts.weighted(config.execution) - penalty
        per_call = execution_per_call(executed)

    has_call = bool(calls)
    guard = config.guard.enabled and (
        (needs_call and not has_call) or (config.guard.on_negative_total and raw < 0)
    )
    fields = dict(
        tool=0.0 if guard else min(1.0, max(0.0, raw)),
        mode=config.mode,
        tool_raw=raw,
        format=parts.format,
        name=parts.name,
        key=parts.key,
        value=parts.value,
        parallel=parts.parallel,
        **_outcome_counts(exec_parts, redundancy),
        redundancy_penalty=penalty,
        n_calls=len(calls),
        n_blocks=total,
        n_valid_blocks=valid,
        needs_call=needs_call,
        has_call=has_call,
        guard_applied=guard,
        per_call=tuple(0.0 for _ in per_call) if guard else tuple(per_call),
    )
    return ToolSide(fields, needs_call, guard)


def _outcome_counts(exec_parts: ExecutionParts, redundancy: Redundancy) -> dict[str, float]:
    """The execution outcome and redundancy counts every reward mode reports."""
    return dict(
        success=exec_parts.success,
        unique=exec_parts.unique,
        duplicate_calls=redundancy.duplicate,
        unneeded_tool_calls=redundancy.unneeded_tool,
        no_call_task_calls=redundancy.no_call_task,
        extra_steps=redundancy.extra_steps,
    )


_MIN_ANSWER_CHARS = 10
"""The reference rates a shorter final answer 0 without asking its judge."""


def _reference_side(rollout: Rollout, task: TaskRecord, config: RewardConfig) -> ToolSide:
    ref = score_text(
        reference_text(rollout),
        [t.name for t in task.tools],
        gold_json(task),
        weights=config.process,
        penalty=config.guard.penalty,
    )
    # slca's own parse, for the counts reported beside the reward (never subtracted).
    calls = policy_calls(rollout)
    redundancy = count_redundancy(calls, task)
    needs_call = bool(task.gold)
    valid, total = block_counts(rollout)
    executed = executed_in_order(rollout.calls)
    exec_parts = execution_parts(executed, format_score(valid, total, needs_call), needs_call)
    guard = config.guard.enabled and ref.no_call
    fields = dict(
        tool=0.0 if guard else ref.process,
        mode=config.mode,
        tool_raw=ref.process,
        format=ref.format,
        name=ref.name,
        key=ref.key,
        value=ref.value,
        parallel=ref.parallel,
        **_outcome_counts(exec_parts, redundancy),
        redundancy_penalty=0.0,
        n_calls=len(ref.scan.calls),
        n_blocks=ref.scan.denom,
        n_valid_blocks=ref.scan.valid,
        needs_call=needs_call,
        has_call=bool(ref.scan.calls),
        guard_applied=guard,
        per_call=tuple(0.0 for _ in executed),
    )
    ask = not ref.no_call and not ref.no_tool_response
    ask = ask and len(rollout.summary.strip()) >= _MIN_ANSWER_CHARS
    return ToolSide(fields, needs_call, guard, ask_summary=ask)


def _resolve_tasks(
    rollouts: Sequence[Rollout], tasks: Mapping[str, TaskRecord] | Sequence[TaskRecord]
) -> list[TaskRecord]:
    if isinstance(tasks, Mapping):
        missing = sorted({r.task_id for r in rollouts if r.task_id not in tasks})
        if missing:
            raise KeyError(f"no task record for rollout task_id(s) {missing[:5]}")
        return [tasks[r.task_id] for r in rollouts]
    if len(tasks) != len(rollouts):
        raise ValueError(f"{len(rollouts)} rollouts but {len(tasks)} tasks")
    return list(tasks)


def _charged_to(rollout: Rollout, truncation: TruncationConfig) -> str | None:
    """The reward head that pays for ``rollout``'s truncation (None: nothing to pay):
    ``truncation.head``, or for ``cut`` the head of the turn the limit cut (the answer
    turn: summary; a call turn: tool)."""
    if truncation.penalty <= 0 or not is_truncated(rollout):
        return None
    if truncation.head != "cut":
        return truncation.head
    return "summary" if rollout.final_turn is not None else "tool"


def score_batch(
    rollouts: Sequence[Rollout],
    tasks: Mapping[str, TaskRecord] | Sequence[TaskRecord],
    config: RewardConfig = DEFAULT_CONFIG,
    *,
    summary_scorer: SummaryScorer | None = None,
    generate: Generate | None = None,
) -> list[RewardBreakdown]:
    """Score rollouts; the summary scorer is asked once, for the whole batch.

    Args:
        tasks: task records by id, or one record per rollout in order.
        summary_scorer: a built scorer to reuse (a loaded reward model, a judge with
            counters); built from ``config.summary`` when None.
        generate: the judge's engine, when ``config.summary.name`` is ``judge``.
    """
    records = _resolve_tasks(rollouts, tasks)
    sides = [tool_side(r, t, config) for r, t in zip(rollouts, records)]
    truncation = config.truncation
    charged = [_charged_to(r, truncation) for r in rollouts]
    ask = [
        i
        for i, (side, r) in enumerate(zip(sides, rollouts))
        if not side.guard and side.ask_summary and charged[i] != "summary" and r.summary.strip()
    ]
    raw: dict[int, float] = {}
    if ask:
        scorer = summary_scorer or build_summary_scorer(config.summary, generate=generate)
        items = [SummaryInput.from_rollout(rollouts[i], records[i]) for i in ask]
        for i, value in zip(ask, scorer.score_batch(items)):
            raw[i] = float(value) if math.isfinite(value) else 0.0
    out = []
    for i, side in enumerate(sides):
        if side.guard:
            summary, summary_raw = config.guard.penalty, None
        elif charged[i] == "summary":
            summary, summary_raw = -truncation.penalty, None
        elif i in raw:
            summary = summary_raw = raw[i]
        else:  # no final answer, or an empty one
            summary, summary_raw = 0.0, None
        fields = side.fields
        if charged[i] == "tool":
            fields = {**fields, "tool": max(0.0, fields["tool"] - truncation.penalty)}
        if config.mode == "reference" and config.guard.on_negative_total and not side.guard:
            tool, summary, routed = route_penalty(
                fields["tool"], summary, fields["tool"] + summary, False
            )
            fields = {**fields, "tool": tool, "guard_applied": routed}
        out.append(
            RewardBreakdown(
                summary=summary,
                summary_raw=summary_raw,
                truncated=is_truncated(rollouts[i]),
                **fields,
            )
        )
    return out


def score(
    rollout: Rollout,
    task: TaskRecord,
    config: RewardConfig = DEFAULT_CONFIG,
    *,
    summary_scorer: SummaryScorer | None = None,
    generate: Generate | None = None,
) -> RewardBreakdown:
    """HierR of one rollout; see the module docstring for the composition."""
    return score_batch([rollout], [task], config, summary_scorer=summary_scorer, generate=generate)[
        0
    ]


def batch_metrics(breakdowns: Sequence[RewardBreakdown]) -> dict[str, float]:
    """Means over a batch, named as DESIGN §8 records them."""
    if not breakdowns:
        return {}
    n = len(breakdowns)

    def mean(attr: str) -> float:
        return sum(float(getattr(b, attr)) for b in breakdowns) / n

    return {
        "reward/tool": mean("tool"),
        "reward/sum": mean("summary"),
        **{f"reward/{p}": mean(p) for p in ("format", "name", "key", "value", "parallel")},
        "reward/guard_rate": mean("guard_applied"),
        "rollout/tool_calls_per_task": mean("n_calls"),
        "rollout/redundant_calls": mean("redundant_calls"),
    }


def per_block_rewards(rollout: Rollout, breakdown: RewardBreakdown) -> list[float]:
    """One execution reward per ``<tool_call>`` block of the trajectory, in order.

    The per-call credit unit is the block (``Rollout.call_index`` labels blocks): a
    block's reward is the mean of its calls' ``per_call`` rewards; a block that ran
    no call (malformed, or in a turn cut off before execution) gets 0.
    """
    n_blocks = sum(len(turn.parsed.blocks) for turn in rollout.turns)
    by_block: dict[int, list[float]] = {}
    for call, reward in zip(executed_in_order(rollout.calls), breakdown.per_call, strict=True):
        by_block.setdefault(call.block, []).append(reward)
    return [sum(by_block[b]) / len(by_block[b]) if b in by_block else 0.0 for b in range(n_blocks)]
