import json

from slca.data.params import SynthParams
from slca.data.synth import generate
from slca.grammar import parse_turn
from slca.simulator import Simulator
from slca.training.config import EngineConfig
from slca.training.engines import TorchEngine
from slca.training.sft import build_example, gold_conversation, reference_summary, sft
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
