"""Preference reward ``R_summary``: scorers of the final answer, registered by name.

- ``grounded``: deterministic, CPU-only; coverage of the task's facts and of values
  from tool responses, minus penalties for unsupported numbers/entities and for a
  length outside bounds;
- ``judge``: an LLM rates the answer 1-5 on a rubric, mapped to [0, 1]; takes any
  ``generate(prompts) -> texts`` callable, so it runs on whichever engine serves it;
- ``reward_model``: a local HF sequence-classification checkpoint, loaded on first use;
- ``marker``: 1 when the summary contains a configured text, else 0: a style choice
  the summary tokens alone decide, for controlled experiments (the credit lab).

A scorer scores a batch of :class:`SummaryInput` at once (judges and reward models
batch). Build one from config with :func:`build_summary_scorer`; the score layer never
asks a scorer about an empty summary (it scores 0).

The ``judge`` and ``reward_model`` scorers live in ``judge.py`` and ``reward_model.py``,
what every scorer shares in ``summary.py``; all are importable from here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slca.rewards.judge import JUDGE_RUBRIC, JudgeScorer, judge_prompt, parse_rating
from slca.rewards.reward_model import RewardModelScorer, render_for_reward_model
from slca.rewards.scorers import register_summary_scorer
from slca.rewards.summary import (
    Generate,
    SummaryInput,
    SummaryScorer,
    build_summary_scorer,
    clean_text,
)

if TYPE_CHECKING:
    from slca.config.rewards import GroundedConfig, MarkerConfig, SummaryConfig

__all__ = [
    "JUDGE_RUBRIC",
    "Generate",
    "GroundedDetails",
    "GroundedScorer",
    "JudgeScorer",
    "MarkerScorer",
    "RewardModelScorer",
    "SummaryInput",
    "SummaryScorer",
    "build_summary_scorer",
    "clean_text",
    "grounded_details",
    "judge_prompt",
    "numbers_in",
    "parse_rating",
    "render_for_reward_model",
]


# ======================================================================== grounded
_MAX_LEAVES = 5_000
_MAX_WALK_DEPTH = 64
_NUMBER_IN_TEXT = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\w])")
_LIST_MARKER = re.compile(r"(?m)^\s*\d{1,2}[.)]\s")
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_NUMERIC_STRING = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_COMMON_CAPITALISED = frozenset(
    "i i'm i've i'll i'd ok okay monday tuesday wednesday thursday friday saturday sunday "
    "january february march april may june july august september october november december "
    "note however".split()
)


def _walk(value: Any) -> Iterator[Any]:
    """Scalar leaves of a JSON value (iteratively, bounded in depth and count); a list
    also yields its length (summaries say "3 flights")."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    emitted = 0
    while stack and emitted < _MAX_LEAVES:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth < _MAX_WALK_DEPTH:
                stack.extend((v, depth + 1) for v in reversed(list(node.values())))
        elif isinstance(node, list):
            emitted += 1
            yield len(node)
            if depth < _MAX_WALK_DEPTH:
                stack.extend((v, depth + 1) for v in reversed(node))
        else:
            emitted += 1
            yield node


def _walk_values(value: Any) -> Iterator[Any]:
    """Scalar leaves only (no list lengths), in document order."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    emitted = 0
    while stack and emitted < _MAX_LEAVES:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth < _MAX_WALK_DEPTH:
                items = node.values() if isinstance(node, dict) else node
                stack.extend((v, depth + 1) for v in reversed(list(items)))
        else:
            emitted += 1
            yield node


def _walk_keys(value: Any) -> Iterator[str]:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth >= _MAX_WALK_DEPTH:
            continue
        if isinstance(node, dict):
            yield from (k for k in node if isinstance(k, str))
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


@dataclass(frozen=True)
class _Number:
    value: float
    decimals: int


def numbers_in(text: str) -> list[_Number]:
    """Magnitudes of the numbers written in ``text`` ("1,234.5" is one number)."""
    out = []
    for m in _NUMBER_IN_TEXT.finditer(text):
        whole, frac = m.group(1).replace(",", ""), m.group(2) or ""
        try:
            out.append(_Number(float(f"{whole}.{frac}" if frac else whole), len(frac)))
        except (OverflowError, ValueError):
            continue
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _decimals(value: float) -> int:
    if isinstance(value, int) or float(value).is_integer():
        return 0
    text = repr(float(value))
    if "e" in text:
        return 6
    return len(text.split(".")[1])


def _rounds_to(stated: _Number, true: float) -> bool:
    """``stated`` is ``true`` rounded to the decimals it shows."""
    try:
        return abs(abs(true) - stated.value) <= 0.5 * 10.0**-stated.decimals + 1e-9
    except OverflowError:
        return False


class _RoundingIndex:
    """Answers "is this stated number some support number rounded to its decimals?"
    in O(1): per number of decimals d, the set of round(s·10^d) (both ways at a half)."""

    def __init__(self, numbers: Sequence[float]):
        self._numbers = sorted({abs(x) for x in numbers if math.isfinite(x)})
        self._keys: dict[int, set[int]] = {}

    def contains(self, stated: _Number) -> bool:
        d = stated.decimals
        if d > 6:
            return any(_rounds_to(stated, s) for s in self._numbers)
        keys = self._keys.get(d)
        if keys is None:
            keys = self._keys[d] = set()
            scale = 10.0**d
            for s in self._numbers:
                v = s * scale
                if v < 2**62:
                    keys.add(math.floor(v + 0.5 + 1e-9))
                    keys.add(math.ceil(v - 0.5 - 1e-9))
        v = stated.value * 10.0**d
        if not v < 2**62:
            return any(_rounds_to(stated, s) for s in self._numbers[-64:])
        return round(v) in keys


def _states_number(numbers: Sequence[_Number], true: float) -> bool:
    """A fact number is stated when the summary shows it rounded to at least
    min(its decimals, 2) places (0.9134 as 0.91, not as 1)."""
    need = min(_decimals(true), 2)
    return any(n.decimals >= need and _rounds_to(n, true) for n in numbers)


def _contains_phrase(text_cf: str, phrase: str) -> bool:
    """``phrase`` occurs in ``text_cf`` (case-folded) not inside a longer word.

    Plain ``str.find`` with boundary checks: a regex per phrase would be compiled per
    call once the ``re`` cache (512 patterns) is outgrown by a batch's distinct values.
    """
    p = phrase.strip().casefold()
    if not p:
        return False
    start = text_cf.find(p)
    while start >= 0:
        end = start + len(p)
        before_ok = start == 0 or not (text_cf[start - 1].isalnum() or text_cf[start - 1] == "_")
        after_ok = end == len(text_cf) or not (text_cf[end].isalnum() or text_cf[end] == "_")
        if before_ok and after_ok:
            return True
        start = text_cf.find(p, start + 1)
    return False


@dataclass(frozen=True)
class GroundedDetails:
    """The grounded scorer's working, for tests and debugging."""

    score: float
    coverage: float
    facts: float | None
    responses: float | None
    unsupported: tuple[str, ...] = ()
    length_ok: bool = True


def _expected(value: Any, max_chars: int) -> list[Any]:
    """The checkable leaves of a fact or response value: numbers and short strings."""
    out = []
    for leaf in _walk_values(value):
        if _is_number(leaf):
            out.append(leaf)
        elif isinstance(leaf, str) and 0 < len(leaf.strip()) <= max_chars:
            out.append(leaf)
    return out


def _as_number(value: Any) -> Any:
    """A numeric string ("0.91", "1,234") as its number; anything else unchanged."""
    if isinstance(value, str):
        text = value.strip().replace(",", "")
        if _NUMERIC_STRING.fullmatch(text):
            try:
                return float(text)
            except (OverflowError, ValueError):
                return value
    return value


def _share_stated(values: Sequence[Any], numbers: Sequence[_Number], text_cf: str) -> float:
    hits = 0
    for v in values:
        v = _as_number(v)
        if _is_number(v):
            hits += _states_number(numbers, v)
        else:
            hits += _contains_phrase(text_cf, v)
    return hits / len(values)


def _at_sentence_start(text: str, start: int) -> bool:
    window = text[max(0, start - 16) : start].rstrip(" \t")
    if not window:
        return True
    return window[-1] in '.!?:;\n"“(*#-•>'


def grounded_details(item: SummaryInput, config: GroundedConfig) -> GroundedDetails:
    """Score one summary with the grounded rubric (see the module docstring)."""
    raw = item.summary
    summary = clean_text(raw[: config.max_chars])
    if not summary.strip():
        return GroundedDetails(0.0, 0.0, None, None, (), False)
    summary_cf = summary.casefold()
    numbers = numbers_in(_LIST_MARKER.sub(" ", summary))

    # coverage: facts, and values from successful responses
    fact_values = [v for fact in item.task.facts.values() for v in _expected(fact, 10**9)]
    response_values: list[Any] = []
    seen: set[str] = set()
    for response in item.successes:
        for v in _expected(response, config.max_value_chars):
            key = repr(v).casefold()
            if key not in seen and len(response_values) < config.max_response_values:
                seen.add(key)
                response_values.append(v)
    facts = _share_stated(fact_values, numbers, summary_cf) if fact_values else None
    responses = _share_stated(response_values, numbers, summary_cf) if response_values else None
    if config.response_values == "fallback" and facts is not None:
        coverage = facts
    else:
        parts = [(config.facts_weight, facts), (config.responses_weight, responses)]
        present = [(w, s) for w, s in parts if s is not None and w > 0]
        weight = sum(w for w, _ in present)
        coverage = sum(w * s for w, s in present) / weight if present else 1.0

    # support: everything the summary may legitimately mention
    support_texts = [m.content for m in item.task.messages]
    support_numbers: list[float] = []
    for source in (*item.responses, item.task.facts):
        for leaf in _walk(source):
            if _is_number(leaf):
                support_numbers.append(abs(float(leaf)))
            elif isinstance(leaf, str):
                support_texts.append(leaf)
        support_texts.extend(_walk_keys(source))
    support_cf = clean_text("\n".join(support_texts)).casefold()
    support_numbers.extend(n.value for n in numbers_in(support_cf))

    unsupported: list[str] = []
    supported = _RoundingIndex(support_numbers)
    for n in numbers:
        if not supported.contains(n):
            unsupported.append(f"{n.value:.{n.decimals}f}")
    for m in _WORD.finditer(summary):
        word = m.group()
        if not word[0].isupper() or word.casefold() in _COMMON_CAPITALISED:
            continue
        if _at_sentence_start(summary, m.start()):
            continue  # a capitalised sentence opener is not evidence of an entity
        bare = re.sub(r"['’]s$", "", word).strip("'’-").casefold()
        if bare and bare not in support_cf:
            unsupported.append(word)
    penalty = min(config.max_unsupported_penalty, config.unsupported_penalty * len(unsupported))

    words = len(summary.split())
    length_ok = len(raw) <= config.max_chars and config.min_words <= words <= config.max_words
    if not length_ok:
        penalty += config.length_penalty
    score = min(1.0, max(0.0, coverage - penalty))
    return GroundedDetails(score, coverage, facts, responses, tuple(unsupported), length_ok)


class GroundedScorer(SummaryScorer):
    def __init__(self, config: GroundedConfig):
        self.config = config

    def score_batch(self, items: Sequence[SummaryInput]) -> list[float]:
        return [grounded_details(item, self.config).score for item in items]


@register_summary_scorer("grounded")
def _grounded(config: SummaryConfig, *, generate: Generate | None = None) -> SummaryScorer:
    return GroundedScorer(config.grounded)


# ======================================================================== marker
class MarkerScorer(SummaryScorer):
    """1.0 for a summary that contains ``config.text``, else 0.0."""

    def __init__(self, config: MarkerConfig):
        self.config = config

    def score_batch(self, items: Sequence[SummaryInput]) -> list[float]:
        return [float(self.config.text in item.summary) for item in items]


@register_summary_scorer("marker")
def _marker(config: SummaryConfig, *, generate: Generate | None = None) -> SummaryScorer:
    return MarkerScorer(config.marker)
