"""The authors' HierR reward, rule by rule: ``rewards.mode: reference``.

A reimplementation of ``compute_score`` in SLCA-GRPO/SLCA-GRPO @ 68539c5
(``rl/slca_grpo/reward_fn.py``, LLM judge aside), written from its semantics
(``tests/fixtures/reference/README.md``) and checked against its outputs
(``tests/fixtures/reference/hierr.jsonl``). slca's own process reward
(:mod:`slca.rewards.process`) stays the default; docs/decisions.md tabulates where
the two differ and why.

The reference scores the whole trajectory as one text, not turn by turn:

1. think spans (``<think>``/``<thinking>`` to the nearest later closing tag of
   either name) are deleted first;
2. a block runs from ``<tool_call>`` to the nearest later ``</tool_call>``; it is
   valid when its JSON is an object or a list of objects, each naming an allowed
   tool, with arguments = the first truthy of ``arguments``/``parameters`` (else
   ``{}``), which must be an object;
3. if the task needs a call and the text has no ``<tool_call>`` tag at all, the
   score is the penalty and every part 0 (the omission guard);
4. otherwise R_tool = 0.10 format + 0.25 name + 0.15 key + 0.20 value + 0.30
   parallel (the configured process weights), with no redundancy penalty.

Pure functions of strings and JSON values; nothing here raises on any model output.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slca.config.rewards import ProcessWeights
from slca.data.record import TaskRecord
from slca.rollout.chat import tool_message
from slca.rollout.types import Rollout

_THINK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL)
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_RESPONSE = re.compile(r"<tool_response>.*?</tool_response>", re.DOTALL)
OPEN, CLOSE = "<tool_call>", "</tool_call>"

SUCCESS_THRESHOLDS = (0.7, 0.8, 0.9, 1.0)
"""The reference reports ``success@t`` (on the normalised score) and ``tool_success@t``
(on name F1) at these thresholds; 1.0 is compared with a 1e-9 tolerance."""

_TRUTH = {"true": True, "1": True, "false": False, "0": False}


# ----------------------------------------------------------------- loose equality
def loose_equal(a: Any, b: Any) -> bool:
    """The reference's value equality, with Python's semantics; the first rule that
    decides wins:

    ``None`` equals only ``None``; equal ``str(x).strip().lower()`` (so ``True`` equals
    ``"true"``, and ``['a']`` equals ``"['A']"``); both accepted by ``float()`` and
    within 1e-9 (so ``True == 1``, ``"1e1" == 10``); both lowered strings in
    ``{true, 1}`` or ``{false, 0}``; two containers equal as sorted-key JSON (order
    counts, ``1 != 1.0``). Values the reference would crash on (an int too large for
    a float, containers too deep for ``str``) are compared as far as they can be and
    are otherwise unequal.
    """
    if a is None or b is None:
        return a is None and b is None
    sa, sb = _lowered(a), _lowered(b)
    if sa is not None and sa == sb:
        return True
    fa, fb = _as_float(a), _as_float(b)
    if fa is not None and fb is not None and abs(fa - fb) < 1e-9:
        return True
    ta, tb = _TRUTH.get(sa) if sa is not None else None, _TRUTH.get(sb) if sb is not None else None
    if ta is not None and tb is not None:
        return ta == tb
    if isinstance(a, list | dict) and isinstance(b, list | dict):
        try:
            return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
        except (TypeError, ValueError, RecursionError):
            return False
    return False


def _lowered(value: Any) -> str | None:
    try:
        return str(value).strip().lower()
    except (RecursionError, ValueError):  # too deep, or an int too long to print
        return None


def _as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


# ----------------------------------------------------------------- blocks
@dataclass(frozen=True)
class Call:
    """A call in a valid block: the tool name and its argument object."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class BlockScan:
    """What the reference reads from the (think-stripped) text's ``<tool_call>`` tags."""

    open: int
    """``<tool_call>`` tags."""
    close: int
    """``</tool_call>`` tags."""
    valid: int
    """Valid blocks."""
    blocks: tuple[tuple[Call, ...], ...]
    """The calls of each valid block, in text order."""
    first_error: str | None
    """The first error the reference names: ``json_error`` (empty, unparseable, or not
    an object/list) or ``tool_not_found``; None when no such error occurred."""

    @property
    def denom(self) -> int:
        return max(self.open, self.close)

    @property
    def calls(self) -> list[Call]:
        return [call for block in self.blocks for call in block]

    @property
    def passed(self) -> bool:
        """Every tag paired and every block valid (vacuously true without tags)."""
        return self.denom == 0 or (self.open == self.close and self.valid == self.denom)

    @property
    def error_type(self) -> str:
        if self.passed:
            return "none"
        return self.first_error or "partial"


def strip_think(text: str) -> str:
    """Delete each think span, left to right (an opening tag never closed stays)."""
    return _THINK.sub("", text)


def scan_blocks(text: str, allowed_tools: Sequence[str]) -> BlockScan:
    """Count tags and validate blocks of ``text`` (think spans already removed)."""
    allowed = {str(t) for t in allowed_tools}
    blocks: list[tuple[Call, ...]] = []
    first_error: str | None = None
    for content in _BLOCK.findall(text):
        calls, error = _parse_block(content.strip(), allowed)
        if calls is not None:
            blocks.append(calls)
        elif first_error is None:
            first_error = error
    return BlockScan(text.count(OPEN), text.count(CLOSE), len(blocks), tuple(blocks), first_error)


def _parse_block(content: str, allowed: set[str]) -> tuple[tuple[Call, ...] | None, str | None]:
    """``(calls, None)`` for a valid block, else ``(None, error name or None)``."""
    if not content:
        return None, "json_error"
    try:
        parsed = json.loads(content)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than json can
        return None, "json_error"
    if isinstance(parsed, dict):
        objects = [parsed]
    elif isinstance(parsed, list):
        objects = parsed
    else:
        return None, "json_error"
    calls = []
    for obj in objects:
        if not isinstance(obj, dict):
            return None, None
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            return None, None
        if name not in allowed:
            return None, "tool_not_found"
        arguments = obj.get("arguments") or obj.get("parameters") or {}
        if not isinstance(arguments, dict):
            return None, None
        calls.append(Call(name, arguments))
    return tuple(calls), None


# ----------------------------------------------------------------- parts
def name_f1(predicted: Sequence[str], gold: Sequence[str]) -> float:
    """Multiset F1 of names: 1 when both are empty, 0 when one is."""
    if not predicted and not gold:
        return 1.0
    if not predicted or not gold:
        return 0.0
    common = sum((Counter(predicted) & Counter(gold)).values())
    return 2.0 * common / (len(predicted) + len(gold))


def _gold_arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return {}
    return arguments if isinstance(arguments, dict) else {}


def key_value_scores(
    calls: Sequence[Call], gold: Sequence[Mapping[str, Any]]
) -> tuple[float, float]:
    """(key, value) averaged over the gold calls that have arguments.

    None has arguments: (1, 1). No calls: (0, 0). Else each such gold call, in gold
    order, takes the unused same-name call maximising key Jaccard + value share (a
    strictly greater sum wins; a sum of 0 takes none, scoring 0); value share = loosely
    equal values on shared keys / gold keys.
    """
    with_arguments = [(g.get("name", ""), args) for g in gold if (args := _gold_arguments(g))]
    if not with_arguments:
        return 1.0, 1.0
    if not calls:
        return 0.0, 0.0
    used: set[int] = set()
    key_total = value_total = 0.0
    for name, gold_args in with_arguments:
        gold_keys = set(gold_args)
        best, best_key, best_value = -1, 0.0, 0.0
        for i, call in enumerate(calls):
            if i in used or call.name != name:
                continue
            keys = set(call.arguments)
            shared = keys & gold_keys
            key = len(shared) / len(keys | gold_keys) if keys else 0.0
            hits = sum(loose_equal(call.arguments.get(k), gold_args.get(k)) for k in shared)
            value = hits / len(gold_keys)
            if key + value > best_key + best_value:
                best, best_key, best_value = i, key, value
        if best >= 0:
            used.add(best)
        key_total += best_key
        value_total += best_value
    return key_total / len(with_arguments), value_total / len(with_arguments)


# ----------------------------------------------------------------- the score
@dataclass(frozen=True)
class ReferenceScore:
    """Every number the reference reports for one trajectory."""

    score: float
    """What the reference trains on: penalty under the guard, else
    ``w_process·process + w_respq·summary``."""
    process: float
    summary: float
    format: float
    name: float
    key: float
    value: float
    parallel: float
    scan: BlockScan
    gold_count: int
    first_gold: int
    first_pred: int
    no_call: bool
    """The omission guard fired (``should_call_but_no_call``)."""
    no_tool_response: bool
    """No complete ``<tool_response>…</tool_response>`` in the text (non-guard path)."""
    norm: float
    """``score / (w_process + w_respq)`` (floored at 0 under the guard)."""
    error_type: str = "none"
    """``missing_allowed_tools`` when the task lists no tools (every field 0)."""

    def fields(self) -> dict[str, float | int]:
        """The numeric fields under the reference's own keys."""
        p = "reward/tool_call/"
        missing = self.error_type != "none"
        out: dict[str, float | int] = {
            "score": self.score,
            f"{p}judge_failed": 0,
            f"{p}judge_parse_failed": 0,
            f"{p}should_call_but_no_call": int(self.no_call),
            f"{p}no_tool_response": int(self.no_tool_response),
            f"{p}format_passed": int(not missing and (self.no_call or self.scan.passed)),
            f"{p}format_score": self.format,
            f"{p}tag_open_n": 0 if self.no_call else self.scan.open,
            f"{p}tag_close_n": 0 if self.no_call else self.scan.close,
            f"{p}tag_denom": 0 if self.no_call else self.scan.denom,
            f"{p}tag_valid_pair_n": 0 if self.no_call else self.scan.valid,
            f"{p}name_match_score": self.name,
            f"{p}key_match_score": self.key,
            f"{p}value_match_score": self.value,
            f"{p}parallel_score": self.parallel,
            f"{p}parallel_match": int(self.parallel == 1.0),
            f"{p}process_score": self.process,
            f"{p}summary_score": self.summary,
            f"{p}weighted_score_norm": self.norm,
        }
        live = not (missing or self.no_call)
        for t in SUCCESS_THRESHOLDS:
            out[f"{p}success@{t}"] = int(live and _at_least(self.norm, t))
        for t in SUCCESS_THRESHOLDS:
            out[f"{p}tool_success@{t}"] = int(live and _at_least(self.name, t))
        out.update(
            {
                f"{p}tool_match_score": self.name,
                f"{p}arg_match_score": (self.key + self.value) / 2.0,
                f"{p}first_step_gold_count": self.first_gold,
                f"{p}first_step_pred_count": self.first_pred,
                f"{p}response_quality_score": self.summary,
                f"{p}pred_tool_count": 0 if self.no_call else len(self.scan.calls),
                f"{p}gold_tool_count": self.gold_count,
                f"{p}total_score": self.norm,
            }
        )
        return out

    def label_fields(self) -> dict[str, str]:
        """The two string fields under the reference's keys."""
        if self.error_type != "none":
            return {
                "reward/error_type": self.error_type,
                "reward/tool_call/format_error_type": "error",
            }
        error = "no_tool_call" if self.no_call else self.scan.error_type
        return {"reward/error_type": "none", "reward/tool_call/format_error_type": error}


def _at_least(x: float, threshold: float) -> bool:
    return x >= (threshold - 1e-9 if threshold == 1.0 else threshold)


def gold_steps(gold: Sequence[Sequence[Mapping[str, Any]]]) -> list[list[Mapping[str, Any]]]:
    """The gold steps that hold a call (the reference drops empty steps)."""
    return [list(step) for step in gold if step]


def score_text(
    text: str,
    allowed_tools: Sequence[str],
    gold: Sequence[Sequence[Mapping[str, Any]]],
    *,
    weights: ProcessWeights | None = None,
    summary: float = 0.0,
    w_process: float = 1.0,
    w_respq: float = 1.0,
    penalty: float = -0.5,
) -> ReferenceScore:
    """The reference's HierR of one trajectory text.

    Args:
        text: the whole trajectory: policy turns and ``<tool_response>`` blocks in order
            (see :func:`slca.rewards.score.reference_text` for a rollout's).
        allowed_tools: the tool names on offer.
        gold: steps, each a list of ``{"name", "arguments"}`` calls; ``[]``: no call needed.
        weights: the process weights (the paper's by default).
        summary: R_summary from a scorer; ignored (0) without a tool response.
        w_process, w_respq: the reference's top-level weights of ``score``.
        penalty: the score under the omission guard.
    """
    weights = weights or ProcessWeights()
    steps = gold_steps(gold)
    flat = [call for step in steps for call in step]
    first_gold = len(steps[0]) if steps else 0
    if not allowed_tools:
        zero = BlockScan(0, 0, 0, (), None)
        return ReferenceScore(
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, zero, 0, 0, 0, False, False, 0.0,
            error_type="missing_allowed_tools",
        )  # fmt: skip
    scan = scan_blocks(strip_think(text), allowed_tools)
    if flat and scan.open == 0:
        norm = max(0.0, penalty / (w_process + w_respq))
        return ReferenceScore(
            penalty, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, scan, len(flat), first_gold, 0,
            True, False, norm,
        )  # fmt: skip
    fmt = scan.valid / scan.denom if scan.denom else 0.0
    calls = scan.calls
    name = name_f1([c.name for c in calls], [g.get("name", "") for g in flat])
    key, value = key_value_scores(calls, flat)
    first_pred = len(scan.blocks[0]) if scan.blocks else 0
    parallel = 1.0 if first_pred == first_gold else 0.0
    process = (
        weights.format * fmt
        + weights.name * name
        + weights.key * key
        + weights.value * value
        + weights.parallel * parallel
    )
    no_response = _RESPONSE.search(text) is None
    summary = 0.0 if no_response or not math.isfinite(summary) else summary
    score = w_process * process + w_respq * summary
    return ReferenceScore(
        score, process, summary, fmt, name, key, value, parallel, scan, len(flat), first_gold,
        first_pred, False, no_response, score / (w_process + w_respq),
    )  # fmt: skip


def route_penalty(
    process: float, summary: float, total: float, flagged: bool
) -> tuple[float, float, bool]:
    """The reference's guard as its estimator applies it, per rollout.

    A rollout the reward flagged (``should_call_but_no_call``) or whose total score is
    negative trains ``R_tool = 0`` and ``R_summary = total`` (the penalty);
    any other keeps its two scores. Returns ``(R_tool, R_summary, guarded)``.
    """
    if flagged or total < 0:
        return 0.0, total, True
    return process, summary, False


# ----------------------------------------------------------------- rollouts
def reference_text(rollout: Rollout) -> str:
    """A rollout as the reference's ``solution_str``: every policy turn, each followed
    by the tool responses the policy was shown after it (one
    ``<tool_response>\n…\n</tool_response>`` per executed call or malformed block, in
    the order the rollout loop sent them), joined by newlines. Chat-template text is
    left out: it holds none of the tags the reference reads.
    """
    by_turn: dict[int, list[Any]] = {}
    for call in sorted(rollout.calls, key=lambda c: c.index):
        by_turn.setdefault(call.turn, []).append(call.response)
    parts: list[str] = []
    last = len(rollout.turns) - 1
    for t, turn in enumerate(rollout.turns):
        parts.append(turn.text)
        if t == last:  # the loop ended here: no response reached the policy
            continue
        responses = iter(by_turn.get(t, []))
        for block in turn.parsed.blocks:
            if not block.ok:
                error = {"error": {"code": "invalid_call", "message": block.error.message}}
                parts.append(_response_block(error))
                continue
            parts.extend(_response_block(r) for _, r in zip(block.calls, responses))
    return "\n".join(parts)


def _response_block(response: Any) -> str:
    try:
        content = tool_message("", response)["content"]
    except (RecursionError, TypeError, ValueError):  # not JSON-serialisable: the block
        content = "null"  # still counts as a response, which is all the reference reads
    return f"<tool_response>\n{content}\n</tool_response>"


def gold_json(task: TaskRecord) -> list[list[dict[str, Any]]]:
    """A task's gold steps as the reference's JSON (name and arguments of each call)."""
    return [[{"name": c.name, "arguments": c.arguments} for c in step] for step in task.gold]
