"""Gold trajectories, rendered exactly as rollouts are: what SFT trains on and what the
value probe reads.

A task's gold steps become assistant turns of ``<tool_call>`` blocks; the simulator
answers them (with the task's world, so the answers state the facts); a reference
summary closes the conversation. Tokens are laid out by the same :class:`ChatRenderer`
the rollout loop uses, so SFT and RL see the same template, and only the assistant
turns (each with its end-of-turn token) carry loss (:class:`SFTExample.loss_mask`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slca.data.record import TaskRecord
from slca.grammar import ToolCall, render_tool_call
from slca.rollout.chat import ChatRenderer, task_messages, tool_message
from slca.simulator import Simulator


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
    end_of_turn: str | None = None,
) -> SFTExample:
    renderer = ChatRenderer(tokenizer, [t.model_dump() for t in task.tools], end_of_turn)
    history = task_messages(task)
    ids = renderer.prompt_ids(history)
    mask = [False] * len(ids)
    end_id = tokenizer.convert_tokens_to_ids(renderer.end_of_turn)
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
