import random

from slca.config.data import SynthParams
from slca.config.engine import EngineConfig
from slca.data.synth import generate
from slca.rollout.gold import build_example, gold_conversation
from slca.simulator import Simulator
from slca.training.engines import TorchEngine
from slca.training.sft import micro_batches, sft
from slca.training.tiny import tiny_model, train_tokenizer


def data():
    tasks = generate(SynthParams(n_tasks=12, domains=["currency"]), seed=3)
    tokenizer = train_tokenizer([m.content for t in tasks for m in t.messages] * 3, 500)
    return tasks, tokenizer


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
