"""ShareGPT-style function-calling rows: Hermes (NousResearch) and Glaive.

The format of ``NousResearch/hermes-function-calling-v1`` and the data built like it
(the JSON inside the values shown unescaped)::

    {"conversations": [
        {"from": "system", "value": "You are a function calling AI model. ... <tools>
            [{"type": "function", "function": {"name": "get_weather", ...}}] </tools> ..."},
        {"from": "human", "value": "What's the weather in Paris?"},
        {"from": "gpt", "value": "<tool_call>
            {"name": "get_weather", "arguments": {"city": "Paris"}} </tool_call>"},
        {"from": "tool", "value": "<tool_response>
            {"name": "get_weather", "content": {"temp_c": 18}} </tool_response>"},
        {"from": "gpt", "value": "It is 18 °C in Paris."}],
     "category": "Weather"}

- Roles: ``system``; ``human``/``user``; ``gpt``/``assistant``/``model``; ``tool``/
  ``function_response``/``observation``/``function``/``ipython`` (a tool result);
  ``function_call`` (an assistant turn whose value is the JSON of a call, or of a list of
  parallel calls, as LLaMA-Factory writes). ``conversations`` (or a ``messages`` list
  whose turns say ``from``) may be a JSON string; a turn may say ``role``/``content``
  instead of ``from``/``value``. A ``system`` column is a system turn put first.
- Tools: a ``tools`` column (JSON list of function objects), when the row has one and
  it is not empty; else every ``<tools>…</tools>`` block of the system turns (a JSON
  list, one function object, or several objects one after another). Hermes's own
  datasets (hermes-function-calling-v1) write tools and calls as Python reprs
  (``{'arguments': {...}, 'name': 'f'}``): a single-quoted block is read by the bounded
  literal parser (literals only, never evaluated), else ``bad_json``. A system turn
  that holds the tools is dropped from the context: it is the format's own
  tool-calling prompt, and slca renders the tools through the chat template itself.
- Calls: each ``<tool_call>…</tool_call>`` block of an assistant turn (JSON or a Python
  literal ``{"name", "arguments"}``, or a list of them) is one call; the calls of one turn run
  in parallel; the text outside the blocks is the turn's content.
- Results: each ``<tool_response>…</tool_response>`` block of a tool turn is one tool
  turn (its text whole), named by the response's ``name`` when it is a JSON object with
  one, else by the preceding assistant turn's calls, in order. A tool turn without
  blocks is one result (a value given as JSON data: its JSON text). A result must
  follow a turn that calls (``bad_message`` otherwise).
- Glaive: an assistant turn ``<functioncall> {json}`` is one call, and a turn
  ``FUNCTION RESPONSE: ...`` a tool result; a system prompt without ``<tools>`` that
  offers "the following functions" lists them as JSON objects one after another.
  Glaive v2's calls hold their arguments as a single-quoted string
  (``{"name": "f", "arguments": '{"city": "Oslo"}'}``): such a call is read by the
  bounded literal parser Toucan's calls use (literals only, never evaluated); a call
  that is neither JSON nor a literal is ``bad_json``.

``category`` (or ``domain``), when present, becomes the tasks' domain, else
``sharegpt``.
"""

from __future__ import annotations

import json
import re
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

NAME = "sharegpt"

ROLES = {
    "system": "system",
    "developer": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "function_call": "function_call",
    "tool": "tool",
    "function_response": "tool",
    "observation": "tool",
    "function": "tool",
    "ipython": "tool",
}
"""A turn's ``from`` -> its role (``function_call``: an assistant turn of JSON calls)."""

_TOOLS_RE = re.compile(r"<tools>(.*?)</tools>", re.DOTALL)
_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_RESPONSE_RE = re.compile(r"<tool_response>(.*?)(?:</tool_response>|\Z)", re.DOTALL)
_GLAIVE_CALL = "<functioncall>"
_GLAIVE_RESPONSE = "FUNCTION RESPONSE:"
_GLAIVE_TOOLS = "following functions"
_END_TOKENS = ("<|endoftext|>", "<|im_end|>")


def _turns_key(row: dict[str, Any]) -> str | None:
    if "conversations" in row:
        return "conversations"
    return "messages" if "messages" in row else None


def _raw_turns(row: dict[str, Any], key: str) -> Any:
    return parse_json(row[key], key)


def sniff(row: Any) -> bool:
    if not isinstance(row, dict):
        return False
    key = _turns_key(row)
    if key is None:
        return False
    try:
        turns = _raw_turns(row, key)
    except RowReject:
        return False
    if not isinstance(turns, list) or not turns:
        return False
    head = turns[:3]
    if key == "messages":  # a plain message list is openai's; sharegpt's says "from"
        return all(isinstance(t, dict) and "from" in t for t in head)
    return all(isinstance(t, dict) and ("from" in t or "role" in t) for t in head)


def json_values(block: str, where: str) -> list[Any]:
    """The JSON values of ``block``: one document, or several one after another
    (one per line, or concatenated). Raises ``bad_json``; never evaluates."""
    block = block.strip()
    try:
        return [json.loads(block)]
    except json.JSONDecodeError:
        pass
    if re.match(r"[\s\[{]*'", block):  # Hermes's own datasets write Python reprs
        return [literal(block, where, "bad_json")]
    decoder = json.JSONDecoder()
    values, i = [], 0
    while i < len(block):
        try:
            value, end = decoder.raw_decode(block, i)
        except json.JSONDecodeError as e:
            quoted = re.match(r"[\s\[{]*'", block[i:]) is not None
            hint = " (single-quoted: Python, not JSON)" if quoted else ""
            raise RowReject("bad_json", where, f"{e.msg} at char {e.pos - i}{hint}") from None
        values.append(value)
        i = end
        while i < len(block) and (block[i].isspace() or block[i] == ","):
            i += 1
    return values


def _tool_list(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        out.extend(v if isinstance(v, list) else [v])
    return out


def _system_tools(value: str, where: str) -> list[Any] | None:
    """The tools a system turn lists; None when it lists none."""
    blocks = [b for b in _TOOLS_RE.findall(value) if b.strip()]
    if blocks:
        return _tool_list([v for b in blocks for v in json_values(b, f"{where}<tools>")])
    if _GLAIVE_TOOLS in value:
        at = value.index(_GLAIVE_TOOLS)
        start = min((i for i in (value.find("{", at), value.find("[", at)) if i >= 0), default=-1)
        if start >= 0:
            return _tool_list(json_values(value[start:], f"{where}<functions>"))
    if _TOOLS_RE.search(value):  # only an empty <tools> </tools>: a prompt with no tool
        return []
    return None


def _call(value: Any, where: str) -> RawCall:
    if not isinstance(value, dict):
        raise RowReject("bad_message", where, f"a call is a {type(value).__name__}, not an object")
    arguments = value.get("arguments", value.get("parameters"))
    return RawCall(value.get("name"), arguments, where)


def _calls(block: str, where: str) -> list[RawCall]:
    calls = []
    for value in json_values(block, where):
        for k, v in enumerate(value if isinstance(value, list) else [value]):
            calls.append(_call(v, f"{where}[{k}]" if isinstance(value, list) else where))
    return calls


def _strip_end(value: str) -> str:
    for token in _END_TOKENS:
        value = value.replace(token, "")
    return value.strip()


def _glaive_call(after: str, where: str) -> tuple[Any, str]:
    """The call after ``<functioncall>``, and the text after the call. Glaive v2 writes
    its arguments as a single-quoted string (``"arguments": '{"city": "Oslo"}'``):
    not JSON but a Python literal, read by the bounded literal parser (never evaluated)
    up to the call's last ``}``."""
    try:
        call, end = json.JSONDecoder().raw_decode(after)
        return call, after[end:]
    except json.JSONDecodeError:
        pass
    end = after.rfind("}") + 1
    return literal(after[:end] or after, where, "bad_json"), after[end:]


def _assistant(value: str, where: str) -> Turn:
    blocks = _CALL_RE.findall(value)
    if blocks:
        calls = [c for j, b in enumerate(blocks) for c in _calls(b, f"{where}.tool_call[{j}]")]
        return Turn("assistant", _strip_end(_CALL_RE.sub("", value)), calls, where=where)
    if _GLAIVE_CALL in value:
        before, _, after = value.partition(_GLAIVE_CALL)
        call, rest = _glaive_call(after.strip(), f"{where}.functioncall")
        content = _strip_end(before + rest)
        return Turn("assistant", content, [_call(call, f"{where}.functioncall")], where=where)
    return Turn("assistant", _strip_end(value), where=where)


def _results(value: str, where: str, pending: list[str | None]) -> list[Turn]:
    """The tool turns of one result turn; ``pending`` holds the names of the calls not
    yet answered, consumed in order."""
    blocks = _RESPONSE_RE.findall(value)
    if not blocks:
        blocks = [
            value.removeprefix(_GLAIVE_RESPONSE) if value.startswith(_GLAIVE_RESPONSE) else value
        ]
    turns = []
    for block in blocks:
        block = _strip_end(block)
        expected = pending.pop(0) if pending else None
        try:
            parsed = json.loads(block)
        except json.JSONDecodeError:
            parsed = None
        name = parsed.get("name") if isinstance(parsed, dict) else None
        if not isinstance(name, str) or not name:
            name = expected
        turns.append(Turn("tool", block, name=name, where=where))
    return turns


def _holds_tools(value: str) -> bool:
    return bool(_TOOLS_RE.search(value)) or (_GLAIVE_TOOLS in value and "{" in value)


def conversation(row: Any) -> Conversation:
    key = _turns_key(row) if isinstance(row, dict) else None
    if key is None:
        raise RowReject("unknown_format", "<row>", "a sharegpt row needs conversations")
    raw = _raw_turns(row, key)
    if not isinstance(raw, list):
        raise RowReject("bad_message", key, "not a list of turns")
    column = parse_json(row.get("tools"), "tools")
    has_column = column not in (None, "", [])
    found: list[Any] = []
    tools_where = "tools"
    turns: list[Turn] = []
    system = row.get("system")
    if isinstance(system, str) and system.strip():
        if not _holds_tools(system):
            turns.append(Turn("system", system, where="system"))
        elif not has_column:
            found.extend(_system_tools(system, "system") or [])
            tools_where = "system"
    pending: list[str | None] = []
    for i, m in enumerate(raw):
        where = f"{key}[{i}]"
        if not isinstance(m, dict):
            raise RowReject("bad_message", where, "a turn is not an object")
        who = m.get("from", m.get("role"))
        if not isinstance(who, str):
            raise RowReject("bad_message", where, "a turn needs a from (or role)")
        role = ROLES.get(who.strip().lower(), who)
        read = tool_text if role == "tool" else text
        value = read(m.get("value", m.get("content")), f"{where}.value")
        if role == "user" and value.lstrip().startswith(_GLAIVE_RESPONSE):
            role = "tool"
        if role == "system":
            if not _holds_tools(value):
                turns.append(Turn("system", value, where=where))
            elif not has_column:
                if not found:
                    tools_where = f"{where}.value<tools>"
                found.extend(_system_tools(value, f"{where}.value") or [])
        elif role == "assistant":
            turn = _assistant(value, where)
            pending = [c.name if isinstance(c.name, str) else None for c in turn.calls]
            turns.append(turn)
        elif role == "function_call":
            calls = _calls(_strip_end(value), f"{where}.value")
            pending = [c.name if isinstance(c.name, str) else None for c in calls]
            turns.append(Turn("assistant", "", calls, where=where))
        elif role == "tool":
            turns.extend(_results(value.lstrip(), where, pending))
        else:
            turns.append(Turn(role, value, where=where))
    domain = row.get("category") or row.get("domain") or NAME
    return Conversation(column if has_column else found, turns, str(domain), tools_where)
