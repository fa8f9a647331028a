import json
import random

import pytest

from slca.config.data import SynthParams
from slca.config.engine import EngineConfig
from slca.config.rewards import GroundedConfig
from slca.data.synth import generate
from slca.grammar import parse_turn
from slca.rewards.preference import SummaryInput, grounded_details
from slca.simulator import Simulator
from slca.training.engines import TorchEngine
from slca.training.sft import (
    build_example,
    gold_conversation,
    micro_batches,
    poor_summary,
    reference_summary,
    sft,
    summary_for,
)
from slca.training.tiny import tiny_model, train_tokenizer


def data():
    tasks = generate(SynthParams(n_tasks=12, domains=["currency"]), seed=3)
    tokenizer = train_tokenizer([m.content for t in tasks for m in t.messages] * 3, 500)
    return tasks, tokenizer


def test_gold_conversations_call_the_gold_and_answer_with_the_facts():
    tasks, _ = data()
    task = next(t for t in tasks if len(t.gold) == 2)
    turns = gold_conversation(task, Simulator())
    assert len(turns) == 3 and turns[-1] == (reference_summary(task), [])
    for (text, messages), step in zip(turns, task.gold):
        assert [c.name for c in parse_turn(text).calls] == [c.name for c in step]
        assert len(messages) == len(step)
    rate = json.loads(turns[1][1][0]["content"])["rate"]
    assert rate in task.facts.values() and str(rate) in reference_summary(task)


def test_an_imported_tasks_own_answer_is_its_reference_summary():
    tasks, _ = data()
    task = tasks[0].model_copy(update={"answer": "It is 4 degrees in Oslo."})
    assert reference_summary(task) == "It is 4 degrees in Oslo."
    assert gold_conversation(task, Simulator())[-1] == ("It is 4 degrees in Oslo.", [])
    assert reference_summary(tasks[0]) != task.answer  # generated tasks: from their facts


def test_loss_falls_only_on_assistant_tokens_that_decode_to_the_gold_turns():
    tasks, tokenizer = data()
    task = next(t for t in tasks if t.gold)
    example = build_example(task, tokenizer, Simulator())
    trained = tokenizer.decode([t for t, m in zip(example.token_ids, example.loss_mask) if m])
    turns = gold_conversation(task, Simulator())
    assert trained == "".join(text + "<|im_end|>" for text, _ in turns)
    assert not any(example.loss_mask[:20])

    examples = [build_example(t, tokenizer, Simulator()) for t in tasks]
    losses = sft(
        TorchEngine(tiny_model(tokenizer), EngineConfig(optim={"lr": 3e-3})),
        examples,
        epochs=3,
        micro_batch_size=4,
        pad_id=tokenizer.pad_token_id,
    )
    assert len(losses) == 9 and losses[-1] < 0.85 * losses[0]


def grounded(task, summary):
    turns = gold_conversation(task, Simulator(), lambda _: summary)
    responses = [json.loads(m["content"]) for _, messages in turns for m in messages]
    item = SummaryInput(summary, task, tuple(responses))
    return grounded_details(item, GroundedConfig()).score


def test_the_grounded_scorer_prefers_the_reference_summary_to_the_poor_one():
    tasks, _ = data()
    with_facts = [t for t in tasks if t.facts]
    assert with_facts
    for task in with_facts:
        assert grounded(task, reference_summary(task)) == 1.0
        assert grounded(task, poor_summary(task)) == 0.0
    no_facts = next(t for t in tasks if not t.facts)
    assert poor_summary(no_facts) == reference_summary(no_facts)


def test_poor_summaries_are_drawn_per_task_from_the_seed_alone():
    tasks = generate(SynthParams(n_tasks=200, domains=["currency"]), seed=3)
    chosen = [summary_for(t, 0.3, seed=0) is poor_summary for t in tasks]
    assert 0.2 < sum(chosen) / len(chosen) < 0.4
    assert chosen == [summary_for(t, 0.3, seed=0) is poor_summary for t in tasks]
    assert chosen != [summary_for(t, 0.3, seed=1) is poor_summary for t in tasks]
    assert not any(summary_for(t, 0.0, seed=0) is poor_summary for t in tasks)
    assert all(summary_for(t, 1.0, seed=0) is poor_summary for t in tasks)
    with pytest.raises(ValueError, match="poor_frac"):
        summary_for(tasks[0], 1.5, seed=0)


def padded_tokens(batches, lengths):
    return sum(max(lengths[i] for i in batch) * len(batch) for batch in batches)


def test_micro_batches_without_grouping_cut_the_shuffled_order_as_it_stands():
    order = random.Random(0).sample(range(50), 50)
    batches = micro_batches(order, [1] * 50, 8, random.Random(1), group_by_length=False)
    assert batches == [order[s : s + 8] for s in range(0, 50, 8)]


def test_grouping_by_length_pads_less_and_still_trains_on_every_example_once():
    rng = random.Random(0)
    lengths = [rng.randint(450, 1200) for _ in range(1000)]
    order = rng.sample(range(1000), 1000)
    plain = micro_batches(order, lengths, 8, random.Random(1), group_by_length=False)
    grouped = micro_batches(order, lengths, 8, random.Random(1), group_by_length=True)
    assert sorted(i for batch in grouped for i in batch) == list(range(1000))
    assert sorted(len(batch) for batch in grouped) == sorted(len(batch) for batch in plain)
    assert padded_tokens(grouped, lengths) < 1.05 * sum(lengths) < padded_tokens(plain, lengths)
    longest = [max(lengths[i] for i in batch) for batch in grouped]
    assert longest != sorted(longest) and longest != sorted(longest, reverse=True)
    again = micro_batches(order, lengths, 8, random.Random(1), group_by_length=True)
    assert again == grouped
    assert micro_batches(order, lengths, 8, random.Random(2), group_by_length=True) != grouped


def test_sft_forwards_in_the_engines_autocast_and_backs_up_outside_it(monkeypatch):
    """bf16 on the CPU: SFT's forward runs in bf16 autocast, its backward outside it."""
    import torch

    tasks, tokenizer = data()
    examples = [build_example(t, tokenizer, Simulator()) for t in tasks[:2]]
    model = tiny_model(tokenizer)
    update = TorchEngine(model, EngineConfig(bf16=True, optim={"lr": 3e-3}))
    logits, inside = set(), []
    model.lm_head.register_forward_hook(lambda _m, _i, out: logits.add(out.dtype))
    real = update.backward
    monkeypatch.setattr(
        update,
        "backward",
        lambda loss, **kw: inside.append(torch.is_autocast_enabled("cpu")) or real(loss, **kw),
    )
    sft(update, examples, epochs=1, micro_batch_size=2, pad_id=tokenizer.pad_token_id)
    assert logits == {torch.bfloat16} and inside == [False]
