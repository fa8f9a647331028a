"""Toucan rows (Toucan-1.5M, the data the paper trains on).

Columns: ``uuid``, ``subset_name``, ``question``, ``target_tools``, ``tools`` (or
``available_tools``: a JSON string of OpenAI function objects) and ``messages``, a JSON
string of turns with the roles ``system``, ``user``, ``assistant``, ``tool_call`` and
``tool_response``::

    [{"role": "user", "content": "Weather in Paris and Rome?"},
     {"role": "assistant", "content": "Let me look both up."},
     {"role": "tool_call",
      "content": "{'name': 'weather', 'arguments': '{\\"city\\": \\"Paris\\"}'}"},
     {"role": "tool_call",
      "content": "{'name': 'weather', 'arguments': '{\\"city\\": \\"Rome\\"}'}"},
     {"role": "tool_response", "content": "18 C"},
     {"role": "tool_response", "content": "24 C"},
     {"role": "assistant", "content": "Paris 18 C, Rome 24 C."}]

A ``tool_call`` turn holds one call as a Python-literal dict (single quotes), whose
``arguments`` is a JSON string. It is read by
:func:`~slca.data.importers.conversation.literal`: as JSON when it is JSON, else as a
Python literal (never code), and only up to ``MAX_LITERAL_CHARS``; anything else is
``bad_arguments``.

Turns become the common model this way:

- consecutive ``tool_call`` turns are one assistant turn whose calls run in parallel
  (one gold step); an ``assistant`` text turn right before them (a preamble, "Let me
  look both up.") is that turn's content;
- a ``tool_response`` turn is a tool turn, named after the call it answers (the
  responses after an assistant turn answer its calls in order), or, past those, after
  its content's ``name`` field when the content is a JSON object that has one;
- the domain is ``subset_name`` (``toucan`` when absent).

``target_tools`` and ``question`` are not used: the calls and the user turns say it.
"""

from __future__ import annotations

import json
from typing import Any

from slca.data.importers.conversation import (
    Conversation,
    RawCall,
    RowReject,
    Turn,
    literal,
    parse_json,
    text,
    tool_text,
)

NAME = "toucan"

_CALL_ROLES = ("tool_call", "tool_response")


def _tools_key(row: dict[str, Any]) -> str | None:
    if "tools" in row:
        return "tools"
    return "available_tools" if "available_tools" in row else None


def sniff(row: Any) -> bool:
    """A row with ``messages`` and tools that either has Toucan's ``target_tools``
    column or a ``tool_call`` / ``tool_response`` turn (an OpenAI row has neither)."""
    if not isinstance(row, dict) or "messages" not in row or _tools_key(row) is None:
        return False
    if "target_tools" in row:
        return True
    try:
        messages = parse_json(row["messages"], "messages")
    except RowReject:
        return False
    return isinstance(messages, list) and any(
        isinstance(m, dict) and m.get("role") in _CALL_ROLES for m in messages
    )


def _arguments(raw: Any, where: str) -> Any:
    """JSON-string arguments decoded here, so that nesting too deep to decode is a
    reject rather than a crash."""
    if not isinstance(raw, str) or not raw.strip():
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise RowReject("bad_arguments", f"{where}.arguments", f"not JSON: {e.msg}") from None
    except RecursionError:
        raise RowReject("bad_arguments", f"{where}.arguments", "nested too deep") from None


def _calls(content: Any, where: str) -> list[RawCall]:
    value = literal(content, where) if isinstance(content, str) else content
    items = value if isinstance(value, list) else [value]
    calls = []
    for j, item in enumerate(items):
        spot = f"{where}[{j}]" if isinstance(value, list) else where
        if not isinstance(item, dict):
            raise RowReject(
                "bad_arguments", spot, f"a call is a {type(item).__name__}, not an object"
            )
        raw = item.get("arguments", item.get("parameters"))
        calls.append(RawCall(item.get("name"), _arguments(raw, spot), spot))
    return calls


def _named_in(content: str) -> str | None:
    """The ``name`` field of a JSON-object result, if it has one."""
    if not content.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(content)
    except (ValueError, RecursionError):
        return None
    name = value.get("name") if isinstance(value, dict) else None
    return name if isinstance(name, str) else None


def conversation(row: Any) -> Conversation:
    if not isinstance(row, dict) or "messages" not in row:
        raise RowReject("unknown_format", "<row>", "a toucan row needs messages")
    messages = parse_json(row["messages"], "messages")
    if not isinstance(messages, list):
        raise RowReject("bad_message", "messages", "not a list of turns")
    turns: list[Turn] = []
    answered = 0  # responses so far to the latest assistant turn's calls
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RowReject("bad_message", where, "a turn needs a role")
        role = m["role"]
        if role == "tool_call":
            calls = _calls(m.get("content"), f"{where}.content")
            if turns and turns[-1].role == "assistant":
                turns[-1].calls.extend(calls)  # a preamble or the calls before: one turn
            else:
                turns.append(Turn("assistant", "", calls, where=where))
                answered = 0
            continue
        read = tool_text if role == "tool_response" else text
        content = read(m.get("content"), f"{where}.content")
        if role == "tool_response":
            last = next((t for t in reversed(turns) if t.role == "assistant"), None)
            calls = last.calls if last is not None else []
            name = calls[answered].name if answered < len(calls) else _named_in(content)
            answered += 1
            turns.append(
                Turn("tool", content, name=name if isinstance(name, str) else None, where=where)
            )
        elif role == "assistant":
            turns.append(Turn("assistant", content, [], where=where))
            answered = 0
        else:
            turns.append(Turn(role, content, where=where))
    key = _tools_key(row) or "tools"
    domain = row.get("subset_name") or NAME
    return Conversation(row.get(key), turns, str(domain), tools_where=key)
