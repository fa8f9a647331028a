"""Builders for reward tests: tasks from gold calls, rollouts from turn texts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from slca.data.record import Call, Message, TaskRecord, ToolSpec
from slca.grammar import parse_turn
from slca.rollout.types import ExecutedCall, Rollout, Turn

Responder = Callable[[str, dict[str, Any]], Any]


def call(name: str, label: str | None = None, accepted=None, **arguments: Any) -> Call:
    return Call(name=name, arguments=arguments, label=label, accepted=accepted)


def make_task(
    gold: list[list[Call]] | None = None,
    *,
    facts: dict[str, Any] | None = None,
    prompt: str = "How warm is it in Paris?",
    extra_tools: tuple[str, ...] = ("get_time",),
    task_id: str = "t-1",
) -> TaskRecord:
    gold = [] if gold is None else gold
    names = sorted({c.name for step in gold for c in step} | set(extra_tools))
    return TaskRecord(
        id=task_id,
        source="test",
        domain="test",
        split="train",
        messages=[Message(role="user", content=prompt)],
        tools=[ToolSpec(name=n, parameters={"type": "object"}) for n in names],
        gold=gold,
        facts=facts or {},
    )


def default_responder(name: str, arguments: dict[str, Any]) -> Any:
    return {"ok": True}


def make_rollout(
    turns: list[str],
    responses: list[Any] | Responder | None = None,
    *,
    task_id: str = "t-1",
) -> Rollout:
    """A rollout of the given policy turns: every parsed call is executed and answered by
    ``responses`` (consumed in call order, or a function of the call). Token arrays stay
    empty; the last turn is final when it has no call block."""
    queue = list(responses) if isinstance(responses, list) else None
    respond = responses if callable(responses) else default_responder
    out_turns, calls, step = [], [], 0
    for t, text in enumerate(turns):
        parsed = parse_turn(text)
        final = t == len(turns) - 1 and not parsed.has_call_block
        out_turns.append(Turn(text=text, parsed=parsed, final=final, token_start=0, token_end=0))
        for c in parsed.calls:
            response = queue.pop(0) if queue else respond(c.name, c.arguments)
            calls.append(ExecutedCall(len(calls), t, step, c.name, c.arguments, response))
        step += bool(parsed.calls)
    return Rollout(
        task_id=task_id, group=0, sample=0, prompt_length=0, turns=out_turns, calls=calls
    )


def tc(name: str, **arguments: Any) -> str:
    """One call block."""
    import json

    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def tcs(*calls: tuple[str, dict[str, Any]]) -> str:
    """One block of parallel calls."""
    import json

    body = [{"name": n, "arguments": a} for n, a in calls]
    return "<tool_call>" + json.dumps(body) + "</tool_call>"


class Build:
    call = staticmethod(call)
    task = staticmethod(make_task)
    rollout = staticmethod(make_rollout)
    tc = staticmethod(tc)
    tcs = staticmethod(tcs)


@pytest.fixture(scope="session")
def b() -> type[Build]:
    return Build
