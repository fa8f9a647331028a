"""The multi-turn tool loop: generate a turn, parse it, run its calls, repeat.

For each task, ``group_size`` rollouts run side by side (one GRPO group); every
generation step batches all unfinished rollouts through the engine. A turn without
a ``<tool_call>`` block is the final answer. A turn with blocks has each
well-formed call sent to the simulator (the calls of one turn together, in order,
scoped to the group so identical calls get identical answers), each malformed
block answered with an error, and the responses appended as tool messages through
the chat template. The loop stops at the final answer, or at ``max_turns``,
``max_total_tokens`` (or a turn cut off by ``max_new_tokens``), or a turn longer
than ``max_turn_bytes`` (measured before the turn is labelled or parsed, which it then
is not: its tokens count as an unparsed final answer).

A task may have later user turns (``follow_ups``, BFCL's multi-turn categories): the
final answer to one user turn is followed by the next user turn's messages and the
rollout goes on; it stops at the final answer to the last one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from slca.data.record import TaskRecord
from slca.generation.engines import Engine, SamplingParams
from slca.grammar import ParsedTurn, Region, parse_turn
from slca.rollout.chat import ChatRenderer, task_messages, tool_message
from slca.rollout.types import ExecutedCall, Rollout, Turn
from slca.segments import KIND_CODE, label_turn_tokens
from slca.simulator import Simulator


@dataclass(frozen=True)
class RolloutLimits:
    max_turns: int = 4
    """Policy turns per user turn; a rollout still calling tools then stops (``max_turns``)."""
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
    follow_ups: list[list[dict[str, Any]]]
    blocks: int = 0
    steps: int = 0
    user_turn: int = 0
    turns_this_user_turn: int = 0
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
    end_of_turn: str | None = None,
    progress: Callable[[int], None] | None = None,
    follow_ups: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]] | None = None,
) -> list[Rollout]:
    """``group_size`` rollouts of each task; rollout ``i`` of task ``g`` is at ``g·G + i``.

    ``first_group`` numbers the groups (the trainer's batch offset). ``progress``
    is called with the number of rollouts finished by each generation step.
    ``follow_ups`` maps a task id to its later user turns (each a list of messages).
    """
    limits = limits or RolloutLimits()
    follow_ups = follow_ups or {}
    states = [
        _start(task, first_group + g, k, tokenizer, end_of_turn, follow_ups.get(task.id, ()))
        for g, task in enumerate(tasks)
        for k in range(group_size)
    ]

    def decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=False)

    generation_step = 0
    while True:
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
                seed=sampling.seed + 7919 * generation_step + first_group,
            )
            generations = engine.generate([s.rollout.token_ids for s in group], params)
            for state, generation in zip(group, generations, strict=True):
                _take_turn(state, generation, decode, simulator, limits)
        generation_step += 1
        if progress is not None:
            progress(sum(s.done for s in active))
    return [s.rollout for s in states]


def _start(
    task: TaskRecord,
    group: int,
    sample: int,
    tokenizer: Any,
    end_of_turn: str | None,
    follow_ups: Sequence[Sequence[Mapping[str, Any]]],
) -> _State:
    tools = [tool.model_dump() for tool in task.tools]
    renderer = ChatRenderer(tokenizer, tools, end_of_turn)
    history = task_messages(task)
    prompt = renderer.prompt_ids(history)
    rollout = Rollout(task_id=task.id, group=group, sample=sample, prompt_length=len(prompt))
    _append(rollout, prompt, policy=False)
    later = [[dict(m) for m in turn] for turn in follow_ups]
    return _State(rollout, task, tools, renderer, history, later)


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
    state: _State, generation, decode, simulator: Simulator, limits: RolloutLimits
) -> None:
    rollout = state.rollout
    turn_number = len(rollout.turns)
    # The size limit comes before labelling and parsing: the work is bounded by it.
    oversize = _utf8_length(decode(generation.token_ids)) > limits.max_turn_bytes
    if oversize:
        text = decode(generation.token_ids)
        parsed = ParsedTurn(text, (Region("text", 0, len(text)),))
        n = len(generation.token_ids)
        kinds, calls = [KIND_CODE["summary"]] * n, [-1] * n
    else:
        labels = label_turn_tokens(decode, generation.token_ids, prefix=rollout.token_ids[-4:])
        text = labels.text
        if generation.stopped and text.endswith(state.renderer.end_of_turn):
            text = text[: -len(state.renderer.end_of_turn)]
        parsed = parse_turn(text)
        kinds = [KIND_CODE[k] for k in labels.kinds]
        calls = [c + state.blocks if c >= 0 else -1 for c in labels.call_index]
    final = not parsed.has_call_block
    start = len(rollout.token_ids)
    _append(
        rollout,
        generation.token_ids,
        policy=True,
        logprobs=generation.logprobs,
        kinds=kinds,
        calls=calls,
    )
    rollout.turns.append(
        Turn(text, parsed, final, start, len(rollout.token_ids), user_turn=state.user_turn)
    )
    state.turns_this_user_turn += 1
    first_block = state.blocks
    state.blocks += len(parsed.blocks)
    if oversize:
        return _finish(state, "max_bytes")
    if not generation.stopped:
        return _finish(state, "max_tokens")
    if final:
        if not state.follow_ups:
            return _finish(state, "stop")
        return _next_user_turn(state, text)
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
    if state.turns_this_user_turn >= limits.max_turns:
        return _finish(state, "max_turns")
    env = state.renderer.environment_ids(state.history, text, tool_messages)
    state.history = [*state.history, {"role": "assistant", "content": text}, *tool_messages]
    _append(rollout, env, policy=False)


def _utf8_length(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _next_user_turn(state: _State, text: str) -> None:
    user = state.follow_ups.pop(0)
    env = state.renderer.environment_ids(state.history, text, user)
    state.history = [*state.history, {"role": "assistant", "content": text}, *user]
    _append(state.rollout, env, policy=False)
    state.user_turn += 1
    state.turns_this_user_turn = 0


def _finish(state: _State, reason: str) -> None:
    state.rollout.finish_reason = reason
    state.done = True
