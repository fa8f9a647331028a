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
"""

from __future__ import annotations

import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slca.data.record import TaskRecord
from slca.rewards.config import GroundedConfig, JudgeConfig, MarkerConfig, RewardModelConfig
from slca.rewards.scorers import SUMMARY_SCORERS, register_summary_scorer
from slca.rollout.types import Rollout
from slca.simulator.core import is_error

if TYPE_CHECKING:
    from slca.rewards.config import SummaryConfig

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


# ======================================================================== judge
JUDGE_RUBRIC = """\
You are grading an assistant's final answer to a user. The assistant called tools; \
their results are shown. Judge only the final answer.

Rubric:
5 - correct, complete and grounded in the tool results; clear and concise.
4 - correct and grounded, with a minor omission or some verbosity.
3 - partly correct or partly grounded; misses something the user asked for.
2 - mostly wrong, unsupported by the tool results, or unhelpful.
1 - wrong, fabricated, empty or off-topic.

## User request
{request}

## Tool results
{context}

## Final answer
{summary}

Reply with a short justification, then a last line of the form "Rating: N" with N from 1 to 5."""

_RATING_PATTERNS = [
    re.compile(r"rating\s*(?:is|of)?\s*[:=]?\s*[*_\[(\s]*([1-5](?:\.\d+)?)(?![\d.]*\d)", re.I),
    re.compile(r"(?<![\d.])([1-5](?:\.\d+)?)\s*(?:/|out\s+of)\s*5(?!\.?\d)", re.I),
    re.compile(r"\*\*\s*([1-5](?:\.\d+)?)\s*\*\*"),
    re.compile(r"score\s*[:=]?\s*[*_\s]*([1-5](?:\.\d+)?)(?![\d.]*\d)", re.I),
    re.compile(r"^\W*([1-5](?:\.\d+)?)\W*$"),
]


def parse_rating(text: str) -> float | None:
    """The 1-5 rating in a judge's reply, or None.

    Recognised, in order of precedence (the last occurrence of the first form found
    wins): ``Rating: 4`` (also ``rating of **4**``), ``4/5`` / ``4 out of 5``,
    ``**4**``, ``Score: 4``, and a reply that is only the digit. Decimals (``4.5``)
    are kept; numbers outside 1-5 are not ratings.
    """
    if not isinstance(text, str):
        return None
    text = text[-4000:]  # the verdict comes last; bounds the cost of long replies
    for pattern in _RATING_PATTERNS:
        found = pattern.findall(text)
        if found:
            value = float(found[-1])
            if 1.0 <= value <= 5.0:
                return value
    return None


def _context(responses: Sequence[Any], limit: int) -> str:
    parts = []
    for i, r in enumerate(responses):
        try:
            body = json.dumps(r, ensure_ascii=False)
        except (RecursionError, TypeError, ValueError):
            body = "<unprintable response>"
        parts.append(f"[{i + 1}] {body[:limit]}")
    text = "\n".join(parts) or "(no tool was called)"
    return text[:limit]


def judge_prompt(item: SummaryInput, config: JudgeConfig) -> str:
    request = "\n".join(m.content for m in item.task.messages if m.role == "user")
    return clean_text(
        JUDGE_RUBRIC.format(
            request=request,
            context=_context(item.responses, config.max_context_chars),
            summary=item.summary[: config.max_summary_chars],
        )
    )


@dataclass
class JudgeScorer(SummaryScorer):
    """Rates each summary with ``generate``; unparseable or failed ratings score
    ``config.failure_score`` and are counted."""

    generate: Generate
    config: JudgeConfig = field(default_factory=JudgeConfig)
    calls: int = 0
    failures: int = 0
    errors: int = 0

    def score_batch(self, items: Sequence[SummaryInput]) -> list[float]:
        if not items:
            return []
        prompts = [judge_prompt(item, self.config) for item in items]
        self.calls += len(prompts)
        try:
            replies = list(self.generate(prompts))
        except Exception:  # an engine failure must not kill the run: score and count it
            replies = []
            self.errors += 1
        if len(replies) != len(prompts):
            replies = [None] * len(prompts)
        scores = []
        for reply in replies:
            rating = parse_rating(reply) if isinstance(reply, str) else None
            if rating is None:
                self.failures += 1
                scores.append(self.config.failure_score)
            else:
                scores.append((rating - 1.0) / 4.0)
        return scores

    def metrics(self) -> dict[str, float]:
        return {
            "judge/calls": float(self.calls),
            "judge/failures": float(self.failures),
            "judge/engine_errors": float(self.errors),
        }


@register_summary_scorer("judge")
def _judge(config: SummaryConfig, *, generate: Generate | None = None) -> SummaryScorer:
    if generate is None:
        raise ValueError(
            "summary scorer 'judge' needs a generate(prompts) -> texts callable (an engine)"
        )
    return JudgeScorer(generate, config.judge)


# ======================================================================== reward model
def render_for_reward_model(tokenizer: Any, task: TaskRecord, summary: str) -> str:
    """The text a reward model scores: the task's prompt turns and the answer, with the
    tokenizer's chat template when it has one, else as ``role: text`` lines. Training a
    reward model (slca.training.summary_rm) renders its pairs with this same function."""
    messages = [{"role": m.role, "content": m.content} for m in task.messages]
    messages.append({"role": "assistant", "content": summary})
    if getattr(tokenizer, "chat_template", None):
        try:
            return clean_text(tokenizer.apply_chat_template(messages, tokenize=False))
        except Exception:  # a template that rejects the roles: fall back to plain text
            pass
    return clean_text("\n".join(f"{m['role']}: {m['content']}" for m in messages))


class RewardModelScorer(SummaryScorer):
    """An HF ``AutoModelForSequenceClassification`` checkpoint scoring (prompt, answer).

    The conversation is rendered with the tokenizer's chat template when it has one,
    else as ``role: text`` lines; inputs are truncated from the left so the answer
    is always seen. Loaded on the first batch.
    """

    def __init__(self, config: RewardModelConfig):
        if not config.path:
            raise ValueError("reward_model.path is required")
        self.config = config
        self._model: Any = None
        self._tokenizer: Any = None
        self._max_length = config.max_length

    def _load(self) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.config.path)
        tokenizer.truncation_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
        model = AutoModelForSequenceClassification.from_pretrained(self.config.path)
        if model.config.pad_token_id is None and tokenizer.pad_token_id is not None:
            model.config.pad_token_id = tokenizer.pad_token_id
        self._model = model.to(self.config.device).eval()
        self._tokenizer = tokenizer
        # Never feed more tokens than the model has positions for (megabyte summaries).
        limits = [self.config.max_length, getattr(tokenizer, "model_max_length", None)]
        limits.append(getattr(model.config, "max_position_embeddings", None))
        self._max_length = min(n for n in limits if isinstance(n, int) and n > 0)

    def render(self, item: SummaryInput) -> str:
        return render_for_reward_model(self._tokenizer, item.task, item.summary)

    def score_batch(self, items: Sequence[SummaryInput]) -> list[float]:
        if not items:
            return []
        if self._model is None:
            self._load()
        import torch

        scores: list[float] = []
        size = self.config.batch_size if self._tokenizer.pad_token is not None else 1
        for start in range(0, len(items), size):
            texts = [self.render(item) for item in items[start : start + size]]
            batch = self._tokenizer(
                texts,
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=self._max_length,
            ).to(self.config.device)
            with torch.no_grad():
                logits = self._model(**batch).logits.float()
            if logits.shape[-1] == 1:
                values = logits[:, 0]
                if self.config.transform == "sigmoid":
                    values = torch.sigmoid(values)
            else:
                values = torch.softmax(logits, dim=-1)[:, self.config.label]
            scores.extend(values.tolist())
        return scores


@register_summary_scorer("reward_model")
def _reward_model(config: SummaryConfig, *, generate: Generate | None = None) -> SummaryScorer:
    return RewardModelScorer(config.reward_model)


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
