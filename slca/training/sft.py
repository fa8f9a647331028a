"""SFT warm start: gold trajectories, rendered exactly as rollouts are, loss on policy tokens.

The examples (:class:`~slca.rollout.gold.SFTExample`: a task's gold calls, the
simulator's answers and a reference summary, laid out by the rollouts' chat renderer)
come from :mod:`slca.rollout.gold`; this module batches them and trains on the
assistant turns (each with its end-of-turn token).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from slca.rollout.gold import SFTExample
from slca.training.batch import first_position, token_logprobs

STEP_METRICS = (
    "sft/loss",
    "sft/lr",
    "sft/epoch",
    "sft/step_tokens",
    "sft/step_s",
    "sft/tokens_per_s",
)
"""Per step: the loss, the learning rate the step used, its epoch, its tokens (padding
left out), its wall time and tokens per second."""

LENGTH_WINDOW = 50
"""Micro-batches per length-sorted window (HF ``LengthGroupedSampler``'s mega-batch)."""


def micro_batches(
    order: Sequence[int],
    lengths: Sequence[int],
    micro_batch_size: int,
    rng: random.Random,
    group_by_length: bool,
) -> list[list[int]]:
    """Cut one epoch's shuffled ``order`` of example indices into micro-batches.

    ``group_by_length`` sorts each window of ``LENGTH_WINDOW`` micro-batches by length
    before cutting, then shuffles the micro-batches with ``rng``: a batch pads to a near
    neighbour's length instead of the longest of eight random ones (the synth
    trajectories run from 455 to 1,217 tokens, and random batches pad by 27 %) while the
    order of batches stays random.
    """
    if group_by_length:
        window = micro_batch_size * LENGTH_WINDOW
        order = [
            i
            for start in range(0, len(order), window)
            for i in sorted(order[start : start + window], key=lambda i: lengths[i])
        ]
    batches = [
        list(order[s : s + micro_batch_size]) for s in range(0, len(order), micro_batch_size)
    ]
    if group_by_length:
        rng.shuffle(batches)
    return batches


def pad_batch(
    chunk: Sequence[SFTExample], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded token ids, attention mask and loss mask, each [batch, longest]."""
    width = max(len(e.token_ids) for e in chunk)
    ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(chunk), width), dtype=torch.bool)
    mask = torch.zeros((len(chunk), width), dtype=torch.bool)
    for row, example in enumerate(chunk):
        n = len(example.token_ids)
        ids[row, :n] = torch.tensor(example.token_ids)
        attention[row, :n] = True
        mask[row, :n] = torch.tensor(example.loss_mask)
    return ids, attention, mask


def sft_steps(n_examples: int, epochs: int, micro_batch_size: int) -> int:
    """The optimizer steps :func:`sft` takes: a batch of up to ``micro_batch_size`` each."""
    return epochs * -(-n_examples // micro_batch_size)


def sft(
    update: Any,
    examples: Sequence[SFTExample],
    *,
    epochs: int,
    micro_batch_size: int,
    pad_id: int,
    seed: int = 0,
    group_by_length: bool = False,
    progress: Callable[[int, float], None] | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
) -> list[float]:
    """Cross-entropy on assistant tokens (token-mean per micro-batch), one optimizer step
    per micro-batch, on the update engine's device and precision. Returns the loss of
    every step. One process: data-parallel SFT is not supported.

    ``progress(step, loss)`` after every step (its ``start(steps)``, when it has one,
    first, with the number of steps); ``on_step(step, figures)`` too, with
    :data:`STEP_METRICS` (what the SFT run logs per step)."""
    if update.world_size > 1:
        raise ValueError(
            f"sft runs in one process; it was launched with {update.world_size} "
            "(run the sft stage without torchrun/deepspeed)"
        )
    model = update.model
    model.train()
    order = list(range(len(examples)))
    lengths = [len(e.token_ids) for e in examples]
    losses = []
    if progress is not None and hasattr(progress, "start"):
        progress.start(sft_steps(len(examples), epochs, micro_batch_size))
    for epoch in range(epochs):
        rng = random.Random(f"{seed}:{epoch}")
        rng.shuffle(order)
        for batch in micro_batches(order, lengths, micro_batch_size, rng, group_by_length):
            began = time.perf_counter()
            chunk = [examples[i] for i in batch]
            ids, attention, mask = (t.to(update.device) for t in pad_batch(chunk, pad_id))
            lr = update.current_lr()  # the rate this step uses (the scheduler steps after)
            update.zero_grad()
            with update.micro_batch():
                with update.autocast():  # the forward and the loss; backward outside it
                    logp, _ = token_logprobs(model, ids, attention, start=first_position(mask))
                    loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
                update.backward(loss)
            update.step()
            losses.append(loss.item())
            if on_step is not None:
                seconds = time.perf_counter() - began
                tokens = float(sum(len(e.token_ids) for e in chunk))
                figures = {
                    "sft/loss": losses[-1],
                    "sft/lr": float(lr),
                    "sft/epoch": float(epoch),
                    "sft/step_tokens": tokens,
                    "sft/step_s": seconds,
                    "sft/tokens_per_s": tokens / seconds if seconds > 0 else float("nan"),
                }
                on_step(len(losses), figures)
            if progress is not None:
                progress(len(losses), losses[-1])
    return losses
