"""The authors' verl RL rows (the parquet their GRPO runs read).

One row is one task: the prompt up to the user turn the policy answers, and the gold
apart from it::

    {"prompt": [{"role": "system", "content": "...<tools>\\n{...}\\n</tools>..."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "<tool_call>\\n{\\"name\\": ...}\\n</tool_call>"},
                {"role": "user", "content": "<tool_response>\\n18 C\\n</tool_response>"},
                {"role": "assistant", "content": "It is 18 C."},
                {"role": "user", "content": "And in Rome?"}],
     "tools": "[{\\"type\\": \\"function\\", \\"function\\": {...}}]",
     "reward_model": {"ground_truth": {"gold_tool_calls": ["get_weather"],
                                       "allowed_tools": ["get_weather"],
                                       "tool_schemas": "[...]", "subset_name": "tool_call"}},
     "extra_info": {"original_turn_index": 1}}

``prompt``, ``reward_model``, its ``ground_truth`` and ``extra_info`` may each be JSON
text. The mapping:

- a system turn that holds a ``<tools>`` block is dropped: it is the tools rendered
  with Hermes boilerplate, and slca renders the task's tools through the chat template
  itself (other system turns stay);
- an assistant turn's ``<tool_call>`` blocks (JSON, parsed by :func:`slca.grammar.parse_turn`,
  never evaluated) are its calls; the text outside them stays its content;
- a user turn that holds only ``<tool_response>`` blocks is tool turns, one per block,
  named after the preceding assistant turn's calls in order; a ``tool`` turn stays one;
- the tools are ``tools``, else ``ground_truth.tool_schemas``; an ``allowed_tools``
  name that is not among them is ``unknown_tool``;
- the gold is ``ground_truth.gold_tool_calls`` (a list, or JSON text of one). A flat
  list is ONE step of parallel calls (as the authors' reward reads it), a list of lists
  is steps. A string item names a tool without its arguments (the released data: the
  call's ``arguments_known`` is false and argument rewards skip it); an object item
  ``{name, arguments}`` has known arguments (an object without ``arguments`` has
  unknown ones). An empty list, with tools offered, is a no-call task;
- the task's place among the conversation's user turns is
  ``extra_info.original_turn_index``; the domain is ``ground_truth.subset_name`` (then
  ``data_source``, then ``verl``).
"""

from __future__ import annotations

from typing import Any

from slca.data.importers.conversation import (
    Conversation,
    RawCall,
    RowReject,
    Turn,
    normalise_tools,
    parse_json,
    text,
    tool_text,
)
from slca.data.limits import CEILING
from slca.grammar import RESPONSE_CLOSE, RESPONSE_OPEN, parse_turn

NAME = "verl"

_GT = "reward_model.ground_truth"


def _ground_truth(row: dict[str, Any]) -> Any:
    reward_model = parse_json(row.get("reward_model"), "reward_model")
    if not isinstance(reward_model, dict):
        return None
    return parse_json(reward_model.get("ground_truth"), _GT)


def sniff(row: Any) -> bool:
    """A row with ``prompt`` whose ``reward_model.ground_truth`` has ``gold_tool_calls``
    (a verl row of another task, a maths answer say, has none)."""
    if not isinstance(row, dict) or "prompt" not in row:
        return False
    try:
        gt = _ground_truth(row)
    except RowReject:
        return False
    return isinstance(gt, dict) and "gold_tool_calls" in gt


def tool_responses(content: str) -> list[str] | None:
    """The bodies of a turn made only of ``<tool_response>`` blocks (and whitespace);
    None for any other turn. Linear in the length."""
    bodies: list[str] = []
    pos, n = 0, len(content)
    while True:
        while pos < n and content[pos].isspace():
            pos += 1
        if pos == n:
            return bodies or None
        if not content.startswith(RESPONSE_OPEN, pos):
            return None
        close = content.find(RESPONSE_CLOSE, pos + len(RESPONSE_OPEN))
        if close < 0:
            return None
        bodies.append(content[pos + len(RESPONSE_OPEN) : close].strip())
        pos = close + len(RESPONSE_CLOSE)


_BLOCK_REASONS = {"bad_shape": "bad_arguments", "unclosed": "bad_message"}
"""A malformed ``<tool_call>`` block's reject reason by its error code (else bad_json)."""


def _assistant(content: str, where: str) -> Turn:
    parsed = parse_turn(content)
    calls = []
    for j, block in enumerate(parsed.blocks):
        spot = f"{where}.tool_call[{j}]"
        if block.error is not None:
            reason = _BLOCK_REASONS.get(block.error.code, "bad_json")
            raise RowReject(reason, spot, f"{block.error.code}: {block.error.message}")
        calls += [
            RawCall(c.name, c.arguments, spot if len(block.calls) == 1 else f"{spot}[{k}]")
            for k, c in enumerate(block.calls)
        ]
    rest = "".join(content[r.start : r.end] for r in parsed.regions if r.kind != "tool_call")
    return Turn("assistant", rest.strip(), calls, where=where)


def _turns(prompt: Any) -> list[Turn]:
    prompt = parse_json(prompt, "prompt")
    if not isinstance(prompt, list):
        raise RowReject("bad_message", "prompt", "not a list of turns")
    turns: list[Turn] = []
    calls: list[RawCall] = []  # the latest assistant turn's calls, answered in order
    answered = 0
    for i, m in enumerate(prompt):
        where = f"prompt[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RowReject("bad_message", where, "a turn needs a role")
        role = m["role"]
        content = (tool_text if role == "tool" else text)(m.get("content"), f"{where}.content")
        bodies = tool_responses(content) if role == "user" else None
        if role == "system" and "<tools>" in content:
            continue  # the tools as the authors rendered them: slca renders its own
        if role == "assistant":
            turns.append(_assistant(content, where))
            calls, answered = turns[-1].calls, 0
        elif bodies is not None or role == "tool":
            for body in bodies if bodies is not None else [content]:
                name = m.get("name") if role == "tool" else None
                if name is None and answered < len(calls):
                    name = calls[answered].name
                answered += 1
                turns.append(
                    Turn("tool", body, name=name if isinstance(name, str) else None, where=where)
                )
        else:
            turns.append(Turn(role, content, where=where))
    if any(t.role == "user" for t in turns) and turns[-1].role != "user":
        raise RowReject(
            "bad_message",
            turns[-1].where,
            f"the prompt ends with a {turns[-1].role} turn, not the user turn to answer",
        )
    return turns


def _gold(raw: Any) -> list[list[RawCall]]:
    where = f"{_GT}.gold_tool_calls"
    raw = parse_json(raw, where)
    if not isinstance(raw, list):
        raise RowReject("unknown_format", where, f"a {type(raw).__name__}, not a list of calls")
    nested = [isinstance(item, list) for item in raw]
    if any(nested) and not all(nested):
        raise RowReject("unknown_format", where, "mixes steps (lists) and calls")
    steps = raw if raw and all(nested) else [raw]
    gold: list[list[RawCall]] = []
    for i, step in enumerate(steps):
        out = []
        for j, item in enumerate(step):
            spot = f"{where}[{i}][{j}]" if all(nested) else f"{where}[{j}]"
            if isinstance(item, dict) and item.get("arguments") is not None:
                out.append(RawCall(item.get("name"), item["arguments"], spot))
            else:
                name = item.get("name") if isinstance(item, dict) else item
                name = name.strip() if isinstance(name, str) else name
                out.append(RawCall(name, None, spot, arguments_known=False))
        gold.append(out)
    return gold


def _turn_index(row: dict[str, Any]) -> int | None:
    extra = parse_json(row.get("extra_info"), "extra_info")
    index = extra.get("original_turn_index") if isinstance(extra, dict) else None
    if isinstance(index, float) and index.is_integer():
        index = int(index)
    return index if isinstance(index, int) and not isinstance(index, bool) and index >= 0 else None


def conversation(row: Any) -> Conversation:
    if not isinstance(row, dict) or "prompt" not in row:
        raise RowReject("unknown_format", "<row>", "a verl row needs a prompt")
    gt = _ground_truth(row)
    if not isinstance(gt, dict) or gt.get("gold_tool_calls") is None:
        raise RowReject(
            "unknown_format", _GT, "a verl row needs reward_model.ground_truth.gold_tool_calls"
        )
    raw_tools, tools_where = row.get("tools"), "tools"
    if raw_tools is None or raw_tools == "":
        raw_tools, tools_where = gt.get("tool_schemas"), f"{_GT}.tool_schemas"
    # only to check allowed_tools: conversation_tasks holds the tools to prepare.limits
    tools = normalise_tools(raw_tools, tools_where, CEILING)
    allowed = parse_json(gt.get("allowed_tools"), f"{_GT}.allowed_tools")
    if allowed is not None and tools:
        if not isinstance(allowed, list):
            raise RowReject("bad_tool", f"{_GT}.allowed_tools", "not a list of tool names")
        names = {t["name"] for t in tools}
        for k, name in enumerate(allowed):
            if name not in names:
                raise RowReject(
                    "unknown_tool", f"{_GT}.allowed_tools[{k}]", f"{name!r} is not offered"
                )
    turns = _turns(row["prompt"])
    gold = _gold(gt["gold_tool_calls"])
    domain = gt.get("subset_name") or row.get("data_source") or NAME
    return Conversation(
        tools,
        turns,
        str(domain),
        tools_where=tools_where,
        gold=gold,
        turn_index=_turn_index(row),
    )
