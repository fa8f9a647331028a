"""The multi-turn tool loop: generate a turn, parse it, run its calls, repeat.

For each task, ``group_size`` rollouts run side by side (one GRPO group); every
generation step batches all unfinished rollouts through the engine. A turn without
a ``<tool_call>`` block is the final answer. A turn with blocks has each
well-formed call sent to the simulator (the calls of one turn together, in order,
scoped to the group so identical calls get identical answers), each malformed
block answered with an error, and the responses appended as tool messages through
the chat template. The loop stops at the final answer, or at ``max_turns``,
``max_total_tokens`` (or a turn cut off by ``max_new_tokens``), or a turn longer
than ``max_turn_bytes``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from slca.data.record import TaskRecord
from slca.grammar import parse_turn
from slca.rollout.chat import END_OF_TURN, ChatRenderer, tool_message
from slca.rollout.engines import Engine, SamplingParams
from slca.rollout.types import ExecutedCall, Rollout, Turn
from slca.segments import KIND_CODE, label_turn_tokens
from slca.simulator import Simulator


@dataclass(frozen=True)
class RolloutLimits:
    max_turns: int = 4
    """Policy turns per rollout; a rollout still calling tools then stops (``max_turns``)."""
    max_total_tokens: int = 2048
    """Prompt + every turn + environment tokens."""
    max_turn_bytes: int = 65_536
    """A turn longer than this (UTF-8) ends the rollout (``max_bytes``) without its calls."""


@dataclass
class _State:
    rollout: Rollout
    task: TaskRecord
    tools: list[dict[str, Any]]
    renderer: ChatRenderer
    history: list[dict[str, Any]]
    blocks: int = 0
    steps: int = 0
    done: bool = False


def run_rollouts(
    tasks: Sequence[TaskRecord],
    *,
    engine: Engine,
    tokenizer: Any,
    simulator: Simulator,
    group_size: int,
    sampling: SamplingParams,
    limits: RolloutLimits | None = None,
    first_group: int = 0,
    end_of_turn: str = END_OF_TURN,
    progress: Callable[[int], None] | None = None,
) -> list[Rollout]:
    """``group_size`` rollouts of each task; rollout ``i`` of task ``g`` is at ``g·G + i``.

    ``first_group`` numbers the groups (the trainer's batch offset). ``progress``
    is called with the number of rollouts finished by each generation step.
    """
    limits = limits or RolloutLimits()
    states = [
        _start(task, first_group + g, k, tokenizer, end_of_turn)
        for g, task in enumerate(tasks)
        for k in range(group_size)
    ]

    def decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=False)

    for turn_number in range(limits.max_turns):
        active = [s for s in states if not s.done]
        if not active:
            break
        budget = [limits.max_total_tokens - len(s.rollout.token_ids) for s in active]
        for state, left in zip(active, budget):
            if left <= 0:
                _finish(state, "max_tokens")
        active = [s for s, left in zip(active, budget) if left > 0]
        if not active:
            break
        # One engine call per distinct budget keeps every rollout within its limit.
        by_budget: dict[int, list[_State]] = {}
        for state in active:
            left = limits.max_total_tokens - len(state.rollout.token_ids)
            by_budget.setdefault(min(sampling.max_new_tokens, left), []).append(state)
        for max_new, group in by_budget.items():
            params = replace(
                sampling,
                max_new_tokens=max_new,
                seed=sampling.seed + 7919 * turn_number + first_group,
            )
            generations = engine.generate([s.rollout.token_ids for s in group], params)
            for state, generation in zip(group, generations, strict=True):
                _take_turn(state, generation, turn_number, decode, simulator, limits)
        if progress is not None:
            progress(sum(s.done for s in active))
    for state in states:
        if not state.done:
            _finish(state, "max_turns")
    return [s.rollout for s in states]


def _start(task: TaskRecord, group: int, sample: int, tokenizer: Any, end_of_turn: str) -> _State:
    tools = [tool.model_dump() for tool in task.tools]
    renderer = ChatRenderer(tokenizer, tools, end_of_turn)
    history = [{"role": m.role, "content": m.content} for m in task.messages]
    prompt = renderer.prompt_ids(history)
    rollout = Rollout(task_id=task.id, group=group, sample=sample, prompt_length=len(prompt))
    _append(rollout, prompt, policy=False)
    return _State(rollout, task, tools, renderer, history)


def _append(
    rollout: Rollout,
    ids: Sequence[int],
    *,
    policy: bool,
    logprobs: Sequence[float] = (),
    kinds: Sequence[int] = (),
    calls: Sequence[int] = (),
) -> None:
    rollout.token_ids.extend(ids)
    rollout.policy_mask.extend([policy] * len(ids))
    rollout.logprobs.extend(logprobs if policy else [0.0] * len(ids))
    rollout.kind_codes.extend(kinds if policy else [-1] * len(ids))
    rollout.call_index.extend(calls if policy else [-1] * len(ids))


def _take_turn(
    state: _State, generation, turn_number: int, decode, simulator: Simulator, limits: RolloutLimits
) -> None:
    rollout = state.rollout
    labels = label_turn_tokens(decode, generation.token_ids, prefix=rollout.token_ids[-4:])
    text = labels.text
    if generation.stopped and text.endswith(state.renderer.end_of_turn):
        text = text[: -len(state.renderer.end_of_turn)]
    parsed = parse_turn(text)
    final = not parsed.has_call_block
    start = len(rollout.token_ids)
    _append(
        rollout,
        generation.token_ids,
        policy=True,
        logprobs=generation.logprobs,
        kinds=[KIND_CODE[k] for k in labels.kinds],
        calls=[c + state.blocks if c >= 0 else -1 for c in labels.call_index],
    )
    rollout.turns.append(Turn(text, parsed, final, start, len(rollout.token_ids)))
    first_block = state.blocks
    state.blocks += len(parsed.blocks)
    if len(text.encode("utf-8", "surrogatepass")) > limits.max_turn_bytes:
        return _finish(state, "max_bytes")
    if not generation.stopped:
        return _finish(state, "max_tokens")
    if final:
        return _finish(state, "stop")
    tool_messages = []
    step = state.steps
    state.steps += 1
    for offset, block in enumerate(parsed.blocks):
        if not block.ok:
            error = {"error": {"code": "invalid_call", "message": block.error.message}}
            tool_messages.append(tool_message("invalid_call", error))
            continue
        for call in block.calls:
            response = simulator.execute(
                state.tools,
                call.name,
                call.arguments,
                scope=(state.task.id, rollout.group),
                context={"world": state.task.world} if state.task.world else None,
            )
            rollout.calls.append(
                ExecutedCall(
                    index=len(rollout.calls),
                    turn=turn_number,
                    step=step,
                    name=call.name,
                    arguments=call.arguments,
                    response=response,
                    block=first_block + offset,
                )
            )
            tool_messages.append(tool_message(call.name, response))
    if turn_number + 1 >= limits.max_turns:
        return _finish(state, "max_turns")
    env = state.renderer.environment_ids(state.history, text, tool_messages)
    state.history = [*state.history, {"role": "assistant", "content": text}, *tool_messages]
    _append(rollout, env, policy=False)


def _finish(state: _State, reason: str) -> None:
    state.rollout.finish_reason = reason
    state.done = True
