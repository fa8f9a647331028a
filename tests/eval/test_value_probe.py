"""The teacher-forced value probe (slca.eval.value_probe): known answers from models
that see the gold sequence and answer right, wrong, or right only on a value's first
token; and the positions it scores are exactly the tokens that write each value."""

import json
from types import SimpleNamespace

import pytest
import torch

from slca.config.data import SynthParams
from slca.data.synth import generate_task
from slca.eval.value_probe import value_probe, value_tokens
from slca.rollout.gold import build_example, reference_summary
from slca.simulator import Simulator
from slca.training.tiny import train_tokenizer


class Teller(torch.nn.Module):
    """A causal LM stand-in whose logits at position j put all mass on
    ``choose(ids, j)``: it reads the whole gold sequence, so it can be made right or
    wrong at will about the next token."""

    def __init__(self, vocab: int, choose):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(()))  # where the probe puts inputs
        self.vocab, self.choose = vocab, choose

    def forward(self, input_ids):
        ids = input_ids[0].tolist()
        logits = torch.zeros(1, len(ids), self.vocab)
        for j in range(len(ids)):
            logits[0, j, self.choose(ids, j)] = 1.0
        return SimpleNamespace(logits=logits)


def following(ids, j):
    """The gold next token (the last position has none: any token)."""
    return ids[j + 1] if j + 1 < len(ids) else 0


@pytest.fixture(scope="module")
def world():
    """Three synth tasks: a value read from a tool's answer (find_city, then
    get_weather), parallel calls, and parallel calls repeating one value."""
    params = SynthParams(n_tasks=6, domains=["weather", "flights"])
    chosen = [("weather", 1), ("weather", 2), ("flights", 4)]
    tasks = [generate_task(i, d, params, seed=3) for d, i in chosen]
    texts = [m.content for t in tasks for m in t.messages]
    texts += [json.dumps(c.arguments) for t in tasks for step in t.gold for c in step]
    tokenizer = train_tokenizer(texts * 3, vocab_size=400)
    return tasks, tokenizer


def example_of(task, tokenizer):
    return build_example(task, tokenizer, Simulator(), reference_summary)


def string_values(task):
    calls = [c for step in task.gold for c in step]
    return [v for c in calls for v in c.arguments.values() if isinstance(v, str)]


def test_every_gold_string_value_is_found_where_the_policy_writes_it(world):
    tasks, tokenizer = world
    for task in tasks:
        example = example_of(task, tokenizer)
        found = value_tokens(task, example, tokenizer)
        assert len(found) == len(string_values(task)) > 0
        for (row, positions), value in zip(found, string_values(task)):
            tool, _, argument = row.partition(".")
            assert tool in {c.name for step in task.gold for c in step} and argument
            assert all(example.loss_mask[k] for k in positions)  # the policy writes them
            assert positions == list(range(positions[0], positions[-1] + 1))
            pieces = [tokenizer.decode([example.token_ids[k]]) for k in positions]
            literal = json.dumps(value)[1:-1]
            # every token is needed: without the first or the last the value is cut
            assert literal in "".join(pieces)
            assert literal not in "".join(pieces[1:])
            assert literal not in "".join(pieces[:-1])


def test_a_model_that_always_predicts_the_gold_token_scores_one(world):
    tasks, tokenizer = world
    probe = value_probe(Teller(len(tokenizer), following), tokenizer, tasks)
    assert probe["values"] == sum(len(string_values(t)) for t in tasks)
    assert probe["value_accuracy"] == probe["first_token_accuracy"] == 1.0
    assert probe["later_token_accuracy"] == 1.0
    for parts in probe["rows"].values():
        assert all(right == n for n, right in parts.values())


def test_a_model_that_always_predicts_a_wrong_token_scores_zero(world):
    tasks, tokenizer = world
    vocab = len(tokenizer)
    wrong = Teller(vocab, lambda ids, j: (following(ids, j) + 1) % vocab)
    probe = value_probe(wrong, tokenizer, tasks)
    assert probe["values"] > 0
    assert probe["value_accuracy"] == probe["first_token_accuracy"] == 0.0
    assert probe["later_token_accuracy"] == 0.0


def test_right_only_on_each_first_token_splits_first_from_later(world):
    """Right exactly where a value starts: every first token, no later one; a value is
    whole only when it is one token long."""
    tasks, tokenizer = world
    firsts, lengths = {}, []
    for task in tasks:
        example = example_of(task, tokenizer)
        found = value_tokens(task, example, tokenizer)
        firsts[tuple(example.token_ids)] = {positions[0] for _, positions in found}
        lengths += [len(positions) for _, positions in found]
    vocab = len(tokenizer)

    def choose(ids, j):
        gold = following(ids, j)
        return gold if j + 1 in firsts[tuple(ids)] else (gold + 1) % vocab

    probe = value_probe(Teller(vocab, choose), tokenizer, tasks)
    assert any(n > 1 for n in lengths)  # the split is tested on real multi-token values
    assert probe["first_token_accuracy"] == 1.0 and probe["later_token_accuracy"] == 0.0
    assert probe["value_accuracy"] == pytest.approx(sum(n == 1 for n in lengths) / len(lengths))


def test_only_synth_tasks_are_probed_and_the_mode_is_put_back(world):
    tasks, tokenizer = world
    model = Teller(len(tokenizer), following).train()
    imported = [t.model_copy(update={"source": "nestful"}) for t in tasks]
    probe = value_probe(model, tokenizer, imported)
    assert probe["values"] == 0 and probe["value_accuracy"] == 0.0 and probe["rows"] == {}
    assert model.training
