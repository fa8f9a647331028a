"""OpenAI / TRL conversational rows: ``messages`` and ``tools``.

The format HF chat templates and TRL's SFT and GRPO trainers read::

    {"messages": [{"role": "system", "content": "..."},
                  {"role": "user", "content": "What's the weather in Paris?"},
                  {"role": "assistant", "content": null, "tool_calls": [
                      {"id": "c1", "type": "function", "function": {
                          "name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "{\\"temp_c\\": 18}"},
                  {"role": "assistant", "content": "It is 18 °C in Paris."}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}]}

``messages`` and ``tools`` may each be a JSON string; a call's ``arguments`` may be a
JSON string or an object; a tool turn names its tool by ``name`` or by the
``tool_call_id`` of the call it answers (one of the assistant turn's before it), and
its ``content`` may be JSON data (kept as its JSON text). A ``developer`` turn is a
system turn. ``domain`` (or ``category``), when present, becomes the tasks' domain.
"""

from __future__ import annotations

from typing import Any

from slca.data.importers.conversation import (
    Conversation,
    RawCall,
    RowReject,
    Turn,
    parse_json,
    text,
    tool_text,
)

NAME = "openai"


def sniff(row: Any) -> bool:
    if not isinstance(row, dict) or "messages" not in row or "tools" not in row:
        return False
    try:
        messages = parse_json(row["messages"], "messages")
    except RowReject:
        return False
    return isinstance(messages, list) and all(
        isinstance(m, dict) and "role" in m for m in messages[:3]
    )


def _calls(message: dict[str, Any], where: str) -> list[RawCall]:
    raw = message.get("tool_calls") or []
    if not isinstance(raw, list):
        raise RowReject("bad_message", f"{where}.tool_calls", "not a list")
    calls = []
    for j, call in enumerate(raw):
        spot = f"{where}.tool_calls[{j}]"
        if not isinstance(call, dict):
            raise RowReject("bad_message", spot, "a call is not an object")
        function = call.get("function", call)
        if not isinstance(function, dict):
            raise RowReject("bad_message", f"{spot}.function", "not an object")
        calls.append(RawCall(function.get("name"), function.get("arguments"), spot))
    legacy = message.get("function_call")  # the pre-tools API: one call per turn
    if isinstance(legacy, dict):
        calls.append(RawCall(legacy.get("name"), legacy.get("arguments"), f"{where}.function_call"))
    return calls


ROLES = {"function": "tool", "developer": "system"}
"""Roles read as another: ``function`` is the pre-tools API's result, ``developer`` is
what OpenAI's newer models call the system turn."""


def _answers(m: dict[str, Any], where: str, ids: dict[str, Any]) -> Any:
    """The name of the call a tool turn answers; a ``tool_call_id`` must be one of the
    calls of the assistant turn before it (``ids``: their id -> name)."""
    call_id = m.get("tool_call_id")
    if call_id in (None, ""):
        return m.get("name")
    if str(call_id) not in ids:
        raise RowReject(
            "bad_message",
            f"{where}.tool_call_id",
            f"{call_id!r} matches no call of the assistant turn before it",
        )
    return m.get("name") or ids[str(call_id)]


def conversation(row: Any) -> Conversation:
    if not isinstance(row, dict) or "messages" not in row or "tools" not in row:
        raise RowReject("unknown_format", "<row>", "an openai row needs messages and tools")
    messages = parse_json(row["messages"], "messages")
    if not isinstance(messages, list):
        raise RowReject("bad_message", "messages", "not a list of turns")
    turns: list[Turn] = []
    ids: dict[str, Any] = {}  # the calls of the assistant turn the tool turns answer
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RowReject("bad_message", where, "a turn needs a role")
        role = ROLES.get(m["role"], m["role"])
        read = tool_text if role == "tool" else text
        content = read(m.get("content"), f"{where}.content")
        if role == "assistant":
            calls = _calls(m, where)
            ids = {
                str(raw["id"]): call.name
                for call, raw in zip(calls, m.get("tool_calls") or [])
                if isinstance(raw, dict) and raw.get("id")
            }
            turns.append(Turn("assistant", content, calls, where=where))
        elif role == "tool":
            name = _answers(m, where, ids)
            turns.append(Turn("tool", content, name=name, where=where))
        else:
            ids = {}
            turns.append(Turn(role, content, where=where))
    domain = row.get("domain") or row.get("category") or NAME
    return Conversation(row["tools"], turns, str(domain))
