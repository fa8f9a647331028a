"""The ``judge`` summary scorer: an LLM rates the answer 1-5 on a rubric, mapped to
[0, 1]; it takes any ``generate(prompts) -> texts`` callable, so it runs on whichever
engine serves it."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slca.rewards.scorers import register_summary_scorer
from slca.rewards.summary import Generate, SummaryInput, SummaryScorer, clean_text

if TYPE_CHECKING:
    from slca.config.rewards import JudgeConfig, SummaryConfig

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
    # the turn being answered (earlier turns of an imported conversation are context),
    # and the data's own final answer where it has one, as a reference to grade against
    request = item.task.messages[-1].content
    if item.task.answer:
        request += f"\n\n(A reference answer from the data: {item.task.answer})"
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
    config: JudgeConfig
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
