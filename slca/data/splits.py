"""Deterministic split assignment with near-duplicate grouping.

Two requests are near-duplicates when their *request keys* are equal: the user text,
Unicode-normalised, case-folded, stripped of punctuation and of filler words (greetings,
thanks, please), as a sorted set of words. "Hi! What's the weather in Paris? Thanks!"
and "what's the weather in paris" share a key; requests about Paris and Lyon do not.

All records with one key go to the same split, chosen by a hash of (seed, key): adding
records never moves existing ones, and the result is the same on every machine.

Drawing from a split (:func:`draw`, :func:`draw_split`) is here too: training, its
held-out validation and evaluation all pick their tasks with it (and keep those whose
prompt fits a token budget with :func:`slca.rollout.chat.fitting_tasks`).
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

from slca.config.data import SplitParams
from slca.data import io
from slca.data.record import EVAL_SPLIT, TaskRecord

_FILLERS = frozenset(
    "hi hello hey there thanks thank you please cheers quick question could help me "
    "be brief".split()
)
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def request_key(text: str) -> str:
    t = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    words = {w for w in _WORD.findall(t) if w not in _FILLERS}
    return " ".join(sorted(words))


def _unit(seed: int, key: str) -> float:
    h = hashlib.sha256(f"{seed}\x00{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def split_for(key: str, seed: int, fractions: SplitParams) -> str:
    u = _unit(seed, key)
    if u < fractions.train:
        return "train"
    if u < fractions.train + fractions.val:
        return "val"
    return "test"


def assign_splits(
    in_domain: Iterable[TaskRecord],
    eval_records: Iterable[TaskRecord],
    seed: int,
    fractions: SplitParams,
    train_only: Iterable[TaskRecord] = (),
) -> tuple[list[TaskRecord], list[tuple[TaskRecord, str]]]:
    """Give in-domain records train/val/test, ``train_only`` records train; eval
    records keep ``eval``.

    Returns (records in output order, dropped): an in-domain record whose request is a
    near-duplicate of an eval record is dropped (with the reason), so no request text
    crosses from training data into a benchmark.
    """
    eval_records = list(eval_records)
    eval_keys = {}
    for r in eval_records:
        eval_keys.setdefault(request_key(r.conversation_text()), r.id)
    kept: list[TaskRecord] = []
    dropped: list[tuple[TaskRecord, str]] = []
    tagged = [(r, None) for r in in_domain] + [(r, "train") for r in train_only]
    for r, fixed in tagged:
        key = request_key(r.conversation_text())
        if key in eval_keys:
            dropped.append((r, f"request is a near-duplicate of eval record {eval_keys[key]}"))
            continue
        kept.append(r.model_copy(update={"split": fixed or split_for(key, seed, fractions)}))
    evals = [r.model_copy(update={"split": EVAL_SPLIT}) for r in eval_records]
    return kept + evals, dropped


def draw(tasks: Sequence[TaskRecord], n: int | None, seed: int) -> list[TaskRecord]:
    """``n`` tasks drawn with ``seed`` from ``tasks`` in id order (all when ``n`` is None
    or larger): the same data and seed give the same subset, whatever the file order."""
    ordered = sorted(tasks, key=lambda t: t.id)
    if n is None or n >= len(ordered):
        return ordered
    return sorted(random.Random(seed).sample(ordered, n), key=lambda t: t.id)


def draw_split(
    in_dir: str | Path,
    split: str,
    sources: list[str] | None,
    n: int | None,
    seed: int,
    *,
    where: str,
    sources_label: str,
    records: Sequence[TaskRecord] | None = None,
) -> list[TaskRecord]:
    """:func:`draw` of ``n`` tasks of one split (only ``sources``, when given); an error
    naming ``where`` (the step) and the sources param (``sources_label``) when none is left.
    ``records``: the split's records when the caller read them (verified) already."""
    if records is None:
        records = io.read_dataset(in_dir, [split])
    pool = [t for t in records if sources is None or t.source in sources]
    if not pool:
        raise ValueError(
            f"{where}: no {split!r} task in {in_dir}"
            + (f" from {sources_label}{sources}" if sources else "")
        )
    return draw(pool, n, seed)
