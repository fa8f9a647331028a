"""A preference reward model for summaries, trained here on preference pairs.

The ``grounded`` scorer credits a summary for the fact values it states, which takes
copying values out of tool responses. The tiny CPU policy cannot copy (its summaries
state wrong values whatever their style), so under ``grounded`` its good and poor
summaries both score about 0 and ``R_summary`` carries no signal the summary tokens
control. A learned preference model is the paper's other kind of ``R_summary`` (a
judge or reward model): this one is an HF sequence classifier with one logit, trained
with the Bradley-Terry loss on pairs built from the task data, and served by the
``reward_model`` scorer like any other checkpoint.

Pairs (chosen ≻ rejected), for each task with facts:
- the reference answer ≻ the poor answer that states nothing (:func:`poor_summary`);
- the reference answer ≻ an answer that ignores the tools (the no-call reply);
- the reference answer ≻ another task's reference answer (off-topic).
For a no-call task: the direct reply ≻ another task's reference answer (claims tool
findings nobody asked for). The model sees the prompt turns and the answer, rendered
by :func:`slca.rewards.preference.render_for_reward_model`, not the tool responses:
it judges whether an answer reports findings for this request, not their values.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from slca.data.record import TaskRecord
from slca.rewards.preference import render_for_reward_model
from slca.rollout.gold import NO_CALL_REPLY, poor_summary, reference_summary


@dataclass(frozen=True)
class PreferencePair:
    task_id: str
    chosen: str
    """Rendered prompt + preferred answer."""
    rejected: str
    """Rendered prompt + dispreferred answer."""
    kind: str
    """Which rejection: ``poor``, ``ignores_tools``, ``off_topic`` or ``claims_findings``."""


def _pair(tokenizer: Any, task: TaskRecord, chosen: str, rejected: str, kind: str):
    return PreferencePair(
        task.id,
        render_for_reward_model(tokenizer, task, chosen),
        render_for_reward_model(tokenizer, task, rejected),
        kind,
    )


def preference_pairs(
    tasks: Sequence[TaskRecord], tokenizer: Any, seed: int
) -> list[PreferencePair]:
    """The pairs of the module docstring, rendered; off-topic answers are drawn from the
    other tasks with facts by a generator seeded from ``seed`` and the task id."""
    with_facts = [t for t in tasks if t.facts]
    pairs = []
    for task in tasks:
        others = [t for t in with_facts if t.id != task.id]
        if not others:
            raise ValueError(f"summary_rm: task {task.id}: no other task with facts to contrast")
        other = reference_summary(random.Random(f"{seed}:{task.id}").choice(others))
        good = reference_summary(task)
        if task.facts:
            pairs += [
                _pair(tokenizer, task, good, poor_summary(task), "poor"),
                _pair(tokenizer, task, good, NO_CALL_REPLY, "ignores_tools"),
                _pair(tokenizer, task, good, other, "off_topic"),
            ]
        else:
            pairs.append(_pair(tokenizer, task, good, other, "claims_findings"))
    return pairs


def _scores(model: Any, tokenizer: Any, texts: list[str], max_length: int) -> torch.Tensor:
    """(N,) logits of the one-logit head for ``texts``."""
    batch = tokenizer(
        texts, return_tensors="pt", padding=True, truncation=True, max_length=max_length
    )
    return model(**batch).logits[:, 0].float()


def pair_accuracy(
    model: Any, tokenizer: Any, pairs: Sequence[PreferencePair], max_length: int, batch: int = 32
) -> dict[str, float]:
    """Share of pairs scored chosen > rejected, overall and per kind."""
    model.eval()
    hits: dict[str, list[bool]] = {}
    with torch.no_grad():
        for start in range(0, len(pairs), batch):
            chunk = pairs[start : start + batch]
            chosen = _scores(model, tokenizer, [p.chosen for p in chunk], max_length)
            rejected = _scores(model, tokenizer, [p.rejected for p in chunk], max_length)
            for p, win in zip(chunk, (chosen > rejected).tolist(), strict=True):
                hits.setdefault(p.kind, []).append(win)
    every = [h for kind in hits.values() for h in kind]
    out = {"accuracy": sum(every) / len(every) if every else 0.0}
    out.update({f"accuracy/{k}": sum(v) / len(v) for k, v in sorted(hits.items())})
    return out


def train_reward_model(
    model: Any,
    tokenizer: Any,
    pairs: Sequence[PreferencePair],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    max_length: int,
    seed: int = 0,
    progress: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Bradley-Terry: minimise ``-log σ(r(chosen) - r(rejected))`` with AdamW, one step per
    ``batch_size`` pairs. Returns every step's loss."""
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    order = list(range(len(pairs)))
    losses = []
    model.train()
    for epoch in range(epochs):
        random.Random(f"{seed}:{epoch}").shuffle(order)
        for start in range(0, len(order), batch_size):
            chunk = [pairs[i] for i in order[start : start + batch_size]]
            texts = [p.chosen for p in chunk] + [p.rejected for p in chunk]
            scores = _scores(model, tokenizer, texts, max_length)
            margin = scores[: len(chunk)] - scores[len(chunk) :]
            loss = -F.logsigmoid(margin).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(float(loss.detach()))
            if progress is not None:
                progress(len(losses), losses[-1])
    model.eval()
    return losses
