import pytest

from slca.rollout.chat import ChatRenderer
from slca.training.tiny import TAG_TOKENS, pretrain_copying, tiny_model, train_tokenizer

TEXTS = [
    'What is the weather in Dublin today? {"name": "get_weather", "arguments": {"city": '
    '"Dublin"}} Order ORD-68557 ships on 2025-09-08.',
    "<tool_call>\n{}\n</tool_call>",
] * 40


@pytest.mark.parametrize("isolate", [False, True])
def test_any_text_round_trips_and_tags_are_single_tokens(isolate):
    tokenizer = train_tokenizer(TEXTS, vocab_size=400, isolate_spaces_and_digits=isolate)
    for text in [*TEXTS[:2], "Ünïcödé  \t spaces\n\nand 12345 🙂"]:
        assert tokenizer.decode(tokenizer.encode(text)) == text
    for tag in TAG_TOKENS:
        assert len(tokenizer.encode(tag, add_special_tokens=False)) == 1


def test_isolated_spaces_and_digits_spell_a_value_alike_in_a_request_and_in_json():
    tokenizer = train_tokenizer(TEXTS, vocab_size=400, isolate_spaces_and_digits=True)

    def spelt(text, value):
        tokens = tokenizer.tokenize(text)
        joined = "".join(tokens)
        start = joined.index(value)
        out, position = [], 0
        for token in tokens:  # the tokens covering the value
            if start <= position < start + len(value):
                out.append(token)
            position += len(token)
        return out

    assert spelt("weather in Dublin today", "Dublin") == spelt('{"city": "Dublin"}', "Dublin")
    assert spelt("order ORD-68557 ships", "68557") == ["6", "8", "5", "5", "7"]
    # GPT-2's pre-tokenizer glues the space to the word: two spellings of one value
    glued = train_tokenizer(TEXTS, vocab_size=400)
    assert "ĠDublin" in glued.tokenize(" Dublin") and "ĠDublin" not in glued.tokenize('"Dublin"')


def test_the_chat_template_renders_with_either_pre_tokenizer():
    for isolate in (False, True):
        tokenizer = train_tokenizer(TEXTS, vocab_size=400, isolate_spaces_and_digits=isolate)
        renderer = ChatRenderer(tokenizer, [])
        ids = renderer.prompt_ids([{"role": "user", "content": "Weather in Dublin?"}])
        assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n")


def _copy_accuracy(model, tokenizer, span, seed):
    """Greedy next-token accuracy on the repeat of fresh random spans of the texts' tokens."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = sorted(
        {i for text in TEXTS for i in tokenizer(text, add_special_tokens=False)["input_ids"]}
    )
    half = torch.tensor(ids)[torch.randint(len(ids), (32, span), generator=generator)]
    input_ids = torch.cat([half, half], dim=1)
    with torch.no_grad():
        predicted = model(input_ids=input_ids).logits[:, span:-1].argmax(-1)
    return (predicted == input_ids[:, span + 1 :]).float().mean().item()


def test_copy_pretraining_teaches_the_random_model_to_repeat_a_span_it_has_seen():
    tokenizer = train_tokenizer(TEXTS, vocab_size=400)
    model = tiny_model(tokenizer, hidden_size=64, intermediate_size=128)
    before = _copy_accuracy(model, tokenizer, span=12, seed=1)
    losses = pretrain_copying(model, tokenizer, TEXTS, steps=150, span=12, batch_size=16)
    after = _copy_accuracy(model, tokenizer, span=12, seed=1)
    assert len(losses) == 150 and losses[-1] < losses[0] / 4
    assert before < 0.1 and after > 0.9, (before, after)


def test_copy_pretraining_is_deterministic_in_its_seed():
    tokenizer = train_tokenizer(TEXTS, vocab_size=400)
    runs = [
        pretrain_copying(tiny_model(tokenizer, hidden_size=32), tokenizer, TEXTS, steps=3, seed=s)
        for s in (0, 0, 1)
    ]
    assert runs[0] == runs[1] != runs[2]


def test_copy_pretraining_refuses_texts_without_tokens():
    tokenizer = train_tokenizer(TEXTS, vocab_size=400)
    with pytest.raises(ValueError, match="fewer than two tokens"):
        pretrain_copying(tiny_model(tokenizer, hidden_size=32), tokenizer, ["", "a"], steps=1)
