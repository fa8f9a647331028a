"""SFT warm start: gold trajectories, rendered exactly as rollouts are, loss on policy tokens.

A task's gold steps become assistant turns of ``<tool_call>`` blocks; the simulator
answers them (with the task's world, so the answers state the facts); a reference
summary closes the conversation. Tokens are laid out by the same
:class:`~slca.rollout.chat.ChatRenderer` the rollout loop uses, so SFT and RL see
the same template, and only the assistant turns (each with its end-of-turn token)
carry loss.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from slca.data.record import TaskRecord
from slca.grammar import ToolCall, render_tool_call
from slca.rollout.chat import END_OF_TURN, ChatRenderer, task_messages, tool_message
from slca.simulator import Simulator
from slca.training.batch import first_position, token_logprobs


@dataclass(frozen=True)
class SFTExample:
    task_id: str
    token_ids: list[int]
    loss_mask: list[bool]


NO_CALL_REPLY = "Here is a short answer based on general knowledge; no tool was needed."
"""The reference answer of a task that needs no call."""


def reference_summary(task: TaskRecord) -> str:
    """The data's own final answer where it has one (imported conversations); else a
    plain answer stating every fact of the task (or a polite direct answer)."""
    if task.answer:
        return task.answer
    if not task.facts:
        return NO_CALL_REPLY
    parts = [f"{key.replace('.', ' ')} is {value}" for key, value in task.facts.items()]
    return "Here is what I found: " + "; ".join(parts) + "."


def poor_summary(task: TaskRecord) -> str:
    """A fluent answer that omits every fact value: what a careless summariser writes.

    It reads like an answer but states nothing (not even the fact keys, which can hold
    values such as ``EUR/GBP``), so the grounded scorer gives it no coverage. Tasks
    without facts keep the reference answer (there is nothing to omit).
    """
    if not task.facts:
        return reference_summary(task)
    return "I looked that up for you; the tools answered, so that is done."


def summary_for(task: TaskRecord, poor_frac: float, seed: int) -> Callable[[TaskRecord], str]:
    """The summary writer of ``task``'s SFT trajectory: :func:`poor_summary` for a
    ``poor_frac`` share of tasks, else :func:`reference_summary`.

    The choice hashes (seed, task id) only, never the tool calls, so summary quality is
    independent of tool correctness (the credit problem SLCA addresses: R_summary is
    then noise for tool tokens).
    """
    if not 0.0 <= poor_frac <= 1.0:
        raise ValueError(f"poor_frac must lie in [0, 1]; got {poor_frac}")
    draw = random.Random(f"{seed}:{task.id}").random()
    return poor_summary if draw < poor_frac else reference_summary


def gold_conversation(
    task: TaskRecord,
    simulator: Simulator,
    summary: Callable[[TaskRecord], str] = reference_summary,
) -> list[tuple[str, list[dict[str, Any]]]]:
    """The gold trajectory as (assistant text, tool messages answering it) turns."""
    tools = [t.model_dump() for t in task.tools]
    context = {"world": task.world} if task.world else None
    turns = []
    for step in task.gold:
        text = "\n".join(render_tool_call(ToolCall(c.name, c.arguments)) for c in step)
        messages = [
            tool_message(
                c.name,
                simulator.execute(tools, c.name, c.arguments, context=context, scope=task.id),
            )
            for c in step
        ]
        turns.append((text, messages))
    turns.append((summary(task), []))
    return turns


def build_example(
    task: TaskRecord,
    tokenizer: Any,
    simulator: Simulator,
    summary: Callable[[TaskRecord], str] = reference_summary,
    end_of_turn: str = END_OF_TURN,
) -> SFTExample:
    renderer = ChatRenderer(tokenizer, [t.model_dump() for t in task.tools], end_of_turn)
    history = task_messages(task)
    ids = renderer.prompt_ids(history)
    mask = [False] * len(ids)
    end_id = tokenizer.convert_tokens_to_ids(end_of_turn)
    for text, messages in gold_conversation(task, simulator, summary):
        turn = renderer.encode(text) + [end_id]
        ids += turn
        mask += [True] * len(turn)
        if messages:
            env = renderer.environment_ids(history, text, messages)
            ids += env
            mask += [False] * len(env)
            history = [*history, {"role": "assistant", "content": text}, *messages]
    return SFTExample(task.id, ids, mask)


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
) -> list[float]:
    """Cross-entropy on assistant tokens (token-mean per micro-batch), one optimizer step
    per micro-batch, on the update engine's device and precision. Returns the loss of
    every step. One process: data-parallel SFT is not supported."""
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
    for epoch in range(epochs):
        rng = random.Random(f"{seed}:{epoch}")
        rng.shuffle(order)
        for batch in micro_batches(order, lengths, micro_batch_size, rng, group_by_length):
            chunk = [examples[i] for i in batch]
            ids, attention, mask = (t.to(update.device) for t in pad_batch(chunk, pad_id))
            update.zero_grad()
            with update.micro_batch():
                with update.autocast():  # the forward and the loss; backward outside it
                    logp, _ = token_logprobs(model, ids, attention, start=first_position(mask))
                    loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
                update.backward(loss)
            update.step()
            losses.append(loss.item())
            if progress is not None:
                progress(len(losses), losses[-1])
    return losses
