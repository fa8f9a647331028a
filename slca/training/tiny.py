"""The embedded default backbone: a byte-level BPE tokenizer trained on the task
texts and a small Qwen2-architecture model, randomly initialised.

Both are real: a ``PreTrainedTokenizerFast`` with a chat template and a
``Qwen2ForCausalLM``, saved and loaded with the usual ``save_pretrained`` /
``from_pretrained``, so every code path a real checkpoint takes is exercised on CPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from slca.data import io
from slca.jsonutil import canonical_json
from slca.rollout.chat import END_OF_TURN, HERMES_TEMPLATE

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", END_OF_TURN)
"""Padding, turn start and turn end (the policy's stop token)."""
TAG_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<tools>",
    "</tools>",
)
"""Grammar tags as single tokens, as in Qwen's vocabulary."""


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 2048, *, isolate_spaces_and_digits: bool = False
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (any text encodes) with the Hermes chat template.

    ``isolate_spaces_and_digits``: whitespace runs and single digits are tokens of their
    own, so a word or a number is spelt by the same tokens in a request (``in Dublin``)
    and in a JSON argument (``"Dublin"``). GPT-2's pre-tokenizer glues the space to the
    word (``ĠDublin`` vs ``Dublin``), so copying a value means mapping one token to
    another, which a tiny model does not learn; with this, copying is the identity.
    """
    tokenizer = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.pre_tokenizer = (
        pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(r"\s+"), behavior="isolated"),
                pre_tokenizers.Digits(individual_digits=True),
                byte_level,
            ]
        )
        if isolate_spaces_and_digits
        else byte_level
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=END_OF_TURN,
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = HERMES_TEMPLATE
    return fast


def tiny_config(tokenizer: PreTrainedTokenizerFast, **overrides: Any) -> Qwen2Config:
    """A Qwen2 configuration sized for CPU: ~0.3 M parameters with the defaults."""
    settings = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    settings.update(overrides)
    return Qwen2Config(**settings)


def tiny_model(
    tokenizer: PreTrainedTokenizerFast, seed: int = 0, **overrides: Any
) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 model for ``tokenizer`` (deterministic in ``seed``)."""
    import torch

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(tiny_config(tokenizer, **overrides))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_tiny(
    texts: Iterable[str], settings: Any, seed: int
) -> tuple[PreTrainedTokenizerFast, Qwen2ForCausalLM]:
    """A tokenizer trained on ``texts`` and a randomly initialised model for it, sized by
    ``settings`` (the shared fields of ``base_model`` and ``pretrain``: vocab_size,
    isolate_spaces_and_digits, hidden_size, num_hidden_layers, num_attention_heads,
    num_key_value_heads, intermediate_size)."""
    tokenizer = train_tokenizer(
        texts,
        settings.vocab_size,
        isolate_spaces_and_digits=settings.isolate_spaces_and_digits,
    )
    model = tiny_model(
        tokenizer,
        seed=seed,
        hidden_size=settings.hidden_size,
        num_hidden_layers=settings.num_hidden_layers,
        num_attention_heads=settings.num_attention_heads,
        num_key_value_heads=settings.num_key_value_heads,
        intermediate_size=settings.intermediate_size,
    )
    return tokenizer, model


def pretrain_copying(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    texts: Iterable[str],
    *,
    steps: int,
    span: int = 32,
    batch_size: int = 32,
    lr: float = 1e-3,
    seed: int = 0,
) -> list[float]:
    """Teach a randomly initialised ``model`` to copy, in place, before its SFT.

    Each sequence is ``span`` tokens drawn from ``texts``' token frequencies (square
    root, so rare tokens, which values are made of, are drawn too), then the same
    ``span`` tokens again; the loss is on the repeat only, which only an induction
    circuit (attend to the token after the previous occurrence of the current one)
    predicts. Built to let the tiny default copy argument values from the request; SFT
    did not use it for that (a value's lookup is keyed on a cue word, not on the token
    being written; docs/results.md, "Copy pretraining before SFT").

    Shapes: each step's batch is ``[batch_size, 2 * span]``. Returns each step's loss.
    """
    import collections

    import torch

    counts: collections.Counter[int] = collections.Counter()
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        counts.update(ids)
    special = set(tokenizer.all_special_ids)
    vocab = torch.tensor([i for i in sorted(counts) if i not in special])
    if len(vocab) < 2:
        raise ValueError("pretrain_copying: the texts encode to fewer than two tokens")
    weights = torch.tensor([counts[i] for i in vocab.tolist()], dtype=torch.float).sqrt()
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        drawn = torch.multinomial(weights, batch_size * span, replacement=True, generator=generator)
        half = vocab[drawn].view(batch_size, span)
        input_ids = torch.cat([half, half], dim=1)
        labels = input_ids.clone()
        labels[:, : span + 1] = -100  # the first token of the repeat is not yet a copy
        loss = model(input_ids=input_ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


def tokenizer_texts(tasks: list[Any]) -> list[str]:
    """What a tiny tokenizer is trained on: every message, tool schema, gold call and
    reference summary of ``tasks``, so each is spelt by few tokens."""
    from slca.rollout.gold import reference_summary

    texts = []
    for task in tasks:
        texts += [m.content for m in task.messages]
        texts += [canonical_json(t.model_dump()) for t in task.tools]
        texts += [
            canonical_json({"name": c.name, "arguments": c.arguments})
            for step in task.gold
            for c in step
        ]
        texts.append(reference_summary(task))
    return texts


def save_checkpoint(model: Any, tokenizer: Any, out_dir: str) -> None:
    """The model and its tokenizer, written then renamed into ``out_dir``."""
    with io.atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
