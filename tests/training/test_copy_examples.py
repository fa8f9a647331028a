"""The id-copy examples of the base's pretraining (slca.training.copy_examples): drawn
the same for the same seed, every id of the demo's shapes among them, and the loss on
exactly the copies, each a copy of an id listed before it."""

from __future__ import annotations

import random
import re

import pytest

from slca.training.copy_examples import copy_examples_hash, id_copy_examples, made_up_id
from slca.training.tiny import train_tokenizer

ID = re.compile(r"[A-Z]{0,3}-?[0-9]{2,7}")


@pytest.fixture(scope="module")
def tokenizer():
    texts = [" ".join(made_up_id(random.Random(i)) for i in range(50)), '"id": "code"']
    return train_tokenizer(texts, 300, isolate_spaces_and_digits=True)


def test_ids_take_the_shapes_of_the_demos_ids_and_more():
    ids = [made_up_id(random.Random(i)) for i in range(3000)]
    assert all(ID.fullmatch(i) and not i.startswith("-") for i in ids)
    shapes = {re.sub("[0-9]", "9", re.sub("[A-Z]", "A", i)) for i in ids}
    assert {"AAA-99999", "AA999", "A9999"} <= shapes  # ORD-12345, LI384, P1234
    assert len(shapes) > 40


def test_the_same_seed_draws_the_same_examples_and_another_seed_others(tokenizer):
    first = id_copy_examples(tokenizer, 20, seed=3)
    assert first == id_copy_examples(tokenizer, 20, seed=3)
    assert copy_examples_hash(first) == copy_examples_hash(id_copy_examples(tokenizer, 20, 3))
    assert copy_examples_hash(first) != copy_examples_hash(id_copy_examples(tokenizer, 20, 4))
    assert id_copy_examples(tokenizer, 0, seed=3) == []


def test_the_loss_is_on_the_copies_and_each_copies_a_listed_id(tokenizer):
    for example in id_copy_examples(tokenizer, 200, seed=0):
        assert len(example.token_ids) == len(example.loss_mask)
        text = tokenizer.decode(example.token_ids)
        listed, _, calls = text.partition("\n")
        # the masked tokens, run by run, are the copies with their closing quotes
        runs, run = [], []
        for token, masked in zip(example.token_ids, example.loss_mask, strict=True):
            if masked:
                run.append(token)
            elif run:
                runs.append(tokenizer.decode(run))
                run = []
        runs += [tokenizer.decode(run)] if run else []
        copies = re.findall(r'": "([^"]+)"', calls)
        assert runs == [f'{c}"' for c in copies]
        assert copies and set(copies) == set(re.split(r"[,;]? ", listed))
        assert not any(example.loss_mask[: len(tokenizer(listed)["input_ids"])])
