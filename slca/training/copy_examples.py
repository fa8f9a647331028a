"""Id-copy examples for the demo base's pretraining.

A tool call's id (``ORD-67494``, ``LI384``) is spelt digit by digit (the base's
tokenizer isolates digits), and no digit can be predicted from the ones before it: the
policy must find the id in the request and copy it on, which takes an induction circuit
keyed on more than the current token (a digit recurs). The generated corpus alone never
formed one in the 3-layer base: order ids were copied whole 0 times of 49 on val.
Each example here lists made-up ids, then writes them again after a key, one at a time,
as calls do; the loss is on the copies only.
"""

from __future__ import annotations

import hashlib
import random
import string
from typing import Any

from slca.rollout.gold import SFTExample

__all__ = ["copy_examples_hash", "id_copy_examples", "made_up_id"]

KEYS = ("id", "code", "ref", "number", "key")
"""Keys the copies are written after (none is an argument of the demo's tools)."""


def made_up_id(rng: random.Random) -> str:
    """An id of a shape common in APIs: up to three capitals, an optional hyphen, and two
    to seven digits (the demo's ``ORD-12345``, ``LI384``, ``P1234`` are among them)."""
    prefix = "".join(rng.choices(string.ascii_uppercase, k=rng.randint(0, 3)))
    hyphen = "-" if prefix and rng.random() < 0.4 else ""
    return prefix + hyphen + "".join(rng.choices(string.digits, k=rng.randint(2, 7)))


def _text(rng: random.Random) -> tuple[str, list[tuple[int, int]]]:
    """One example's text and the character spans of its copies (closing quote included)."""
    ids = [made_up_id(rng) for _ in range(rng.randint(1, 6))]
    order = ids if rng.random() < 0.5 else rng.sample(ids, len(ids))
    text, spans = rng.choice((", ", " ", "; ")).join(ids), []
    for item in order:
        text += f'\n"{rng.choice(KEYS)}": "'
        spans.append((len(text), len(text) + len(item) + 1))
        text += item + '"'
    return text, spans


def id_copy_examples(tokenizer: Any, n: int, seed: int) -> list[SFTExample]:
    """``n`` copy examples, each drawn from ``random.Random(f"{seed}:copy:{i}")`` (the same
    for the same arguments on any machine); a token is in the loss if it overlaps a
    copy's characters.

    Shapes: each example's ``token_ids`` and ``loss_mask`` have one entry per token.
    """
    examples = []
    for i in range(n):
        text, spans = _text(random.Random(f"{seed}:copy:{i}"))
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        mask = [
            any(start < stop and end > begin for begin, stop in spans)
            for start, end in encoded["offset_mapping"]
        ]
        examples.append(SFTExample(f"copy-{i}", list(encoded["input_ids"]), mask))
    return examples


def copy_examples_hash(examples: list[SFTExample]) -> str:
    """sha256 over the examples' tokens and masks, for the base's card."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(repr((example.token_ids, example.loss_mask)).encode())
    return digest.hexdigest()
