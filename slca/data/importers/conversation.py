"""From one conversation, in any format, to task records.

Every format module turns a row into a :class:`Conversation`: the tools on offer and
the turns (system, user, assistant with its calls, tool). This module cuts it into
tasks, one per user turn that an assistant turn answers:

- the policy writes every assistant turn after a user turn, up to the next user turn;
  each of those turns that calls becomes one gold step (its calls run in parallel), and
  the last one that does not call is the reference answer;
- everything before the user turn (earlier user, assistant and tool turns) is context;
- a user turn answered without any call, while tools were offered, is a no-call task.

A row that cannot be imported raises :class:`RowReject` with one of :data:`REASONS`,
the field and what is wrong; the caller writes it to ``rejects.jsonl``.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from slca.config import describe
from slca.config.data import DataLimits
from slca.data import io
from slca.data.checks import limit_problems, schema_problems
from slca.data.limits import task_size_problem
from slca.data.record import Call, ContextCall, Message, TaskRecord

REASONS = {
    "bad_json": "a field that should hold JSON does not parse",
    "bad_arguments": "a call's arguments are not a JSON object",
    "unknown_tool": "a call names a tool the row does not offer",
    "schema_mismatch": "a gold call's arguments fail its tool's parameter schema",
    "duplicate_tools": "two tools of the row share a name",
    "bad_tool": "a tool is not a function with a JSON Schema of its parameters",
    "no_tools": "the row offers no tool",
    "no_user_turn": "the row has no user turn",
    "no_answer": "no user turn is answered by an assistant turn",
    "bad_message": "a turn has no role or text, or the turns are out of order",
    "unknown_format": "the row is not in the file's format",
    "over_limit": "a tool's schema nests too deep, or a description or the task is too "
    "large (prepare.limits)",
}
"""Why a row is rejected (the ``reason`` of a line of ``rejects.jsonl``)."""


class RowReject(ValueError):
    """One input row cannot be imported; ``reason`` is a key of :data:`REASONS`."""

    def __init__(self, reason: str, field: str, message: str) -> None:
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {field}: {message}")
        self.reason, self.field, self.message = reason, field, message


@dataclass
class RawCall:
    """A call as the row writes it: arguments may still be a JSON string."""

    name: Any
    arguments: Any
    where: str
    """The call's place in the row, for error messages (``messages[2].tool_calls[0]``)."""
    arguments_known: bool = True


@dataclass
class Turn:
    role: str
    content: str = ""
    calls: list[RawCall] = field(default_factory=list)
    name: str | None = None
    where: str = ""
    implied: bool = False
    """A turn the format implies rather than writes (xlam's answers: with no call, an
    assistant turn without text), exempt from the check that a turn says something."""


@dataclass
class Conversation:
    tools: list[Any]
    turns: list[Turn]
    domain: str
    tools_where: str = "tools"
    gold: list[list[RawCall]] | None = None
    """Gold given apart from the turns (the authors' verl rows): then the row is one
    task, its last user turn, with this gold."""
    turn_index: int | None = None
    """With ``gold``: the task's place among the conversation's user turns, when the
    row says (verl's ``original_turn_index``)."""


def parse_json(value: Any, where: str) -> Any:
    """A field that may hold JSON text or the value itself."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise RowReject("bad_json", where, f"{e.msg} (column {e.colno})") from None
    except RecursionError:  # thousands of levels: past any schema depth limit
        raise RowReject("over_limit", where, "nests too deep even to parse") from None


MAX_LITERAL_CHARS = 100_000
"""A call written as a Python literal longer than this is refused unparsed."""


def literal(value: str, where: str, reason: str = "bad_arguments") -> Any:
    """A call written as JSON or as a Python literal (Toucan's ``tool_call`` turns,
    Glaive's ``<functioncall>``); never evaluates code.

    Refuses text over :data:`MAX_LITERAL_CHARS` and anything that is not a literal
    (names, calls, attribute access, operators) with ``reason``.
    """
    if len(value) > MAX_LITERAL_CHARS:
        raise RowReject(reason, where, f"a call of {len(value)} chars > {MAX_LITERAL_CHARS}")
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        pass
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        raise RowReject(
            reason, where, f"neither JSON nor a Python literal ({type(e).__name__})"
        ) from None
    try:  # a literal may hold what JSON cannot (bytes, sets, complex, nan): refuse it
        return json.loads(json.dumps(parsed, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as e:
        raise RowReject(reason, where, f"not JSON data: {e}") from None


def text(value: Any, where: str) -> str:
    """A turn's text: a string, null (empty), or OpenAI's list of text parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        return "".join(str(p.get("text", "")) for p in value if p.get("type", "text") == "text")
    raise RowReject("bad_message", where, f"content is a {type(value).__name__}, not text")


def tool_text(value: Any, where: str) -> str:
    """A tool result's text: as :func:`text`, and a result given as JSON data (an
    object, a list that is not text parts, a number) is that JSON, as the tool wrote it."""
    if (
        value
        and isinstance(value, list)
        and all(isinstance(p, dict) and "type" in p for p in value)
    ):
        return text(value, where)
    if isinstance(value, dict | list | int | float):  # bool is an int
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as e:
            raise RowReject("bad_message", where, f"a result that is not JSON: {e}") from None
    return text(value, where)


@dataclass(frozen=True)
class ToolSet:
    """A row's tools as task tool specs, with a compiled validator of each one's
    parameters. Rows of one dataset share a few tool lists: one is built per list."""

    tools: list[dict[str, Any]]
    validators: dict[str, Any]


def tool_set(raw: Any, where: str, limits: DataLimits | None = None) -> ToolSet:
    try:
        key = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)
    except RecursionError:  # thousands of levels: past any schema depth limit
        raise RowReject("over_limit", where, "nests too deep even to serialise") from None
    return _tool_set(key, isinstance(raw, str), where, limits or DataLimits())


@lru_cache(maxsize=1024)
def _tool_set(key: str, was_text: bool, where: str, limits: DataLimits) -> ToolSet:
    tools = normalise_tools(key if was_text else json.loads(key), where, limits)
    return ToolSet(tools, {t["name"]: _validator(t["parameters"]) for t in tools})


def _validator(schema: dict[str, Any]) -> Any:
    # jsonschema-rs (as the simulator uses) is ~10x faster here than jsonschema, which
    # decides an import's speed; formats are not asserted, as the GE suite's validator
    # (jsonschema, no format checker) does not. A schema jsonschema-rs cannot compile
    # (an unknown $schema URI, say) falls back to jsonschema.
    try:
        return jsonschema_rs.validator_for(schema, validate_formats=False)
    except Exception:
        return Draft202012Validator(schema)


def _first_error(validator: Any, instance: Any) -> tuple[str, str] | None:
    """(dotted path, message) of the first error, in path order; None when valid."""
    errors = list(validator.iter_errors(instance))
    if not errors:
        return None
    paths = [
        [str(p) for p in (e.instance_path if hasattr(e, "instance_path") else e.path)]
        for e in errors
    ]
    first = min(range(len(errors)), key=lambda i: paths[i])
    return ".".join(paths[first]), errors[first].message


def normalise_tools(raw: Any, where: str, limits: DataLimits | None = None) -> list[dict[str, Any]]:
    """OpenAI function objects (``{"type": "function", "function": {...}}``) or flat
    ``{name, description, parameters}`` as task tool specs; names must be unique, and
    each within the size ``limits`` (default: the defaults)."""
    raw = parse_json(raw, where)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RowReject("bad_tool", where, f"expected a list of tools, got {type(raw).__name__}")
    tools: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(raw):
        spot = f"{where}[{i}]"
        tool = parse_json(tool, spot)
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            tool = tool["function"]
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise RowReject("bad_tool", spot, "a tool needs a string name")
        name = tool["name"].strip()
        if not name or any(c.isspace() for c in name):
            raise RowReject("bad_tool", f"{spot}.name", f"{name!r} is not a function name")
        if name in seen:
            raise RowReject("duplicate_tools", f"{spot}.name", f"{name!r} is offered twice")
        seen.add(name)
        parameters = parse_json(tool.get("parameters"), f"{spot}.parameters")
        if parameters is None or parameters == {}:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
            raise RowReject("bad_tool", f"{spot}.parameters", "not an object JSON Schema")
        description = tool.get("description") or ""
        tools.append({"name": name, "description": str(description), "parameters": parameters})
    for reason, problems in (
        ("over_limit", limit_problems(tools, limits)),
        ("bad_tool", schema_problems(tools, limits)),
    ):
        if problems:
            spot, message = problems[0]
            raise RowReject(reason, f"{where}{spot.removeprefix('tools')}", message)
    return tools


def arguments_of(call: RawCall) -> dict[str, Any]:
    args = call.arguments
    if args is None or args == "":
        return {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as e:
            raise RowReject(
                "bad_arguments", f"{call.where}.arguments", f"not JSON: {e.msg}"
            ) from None
    if not isinstance(args, dict):
        raise RowReject(
            "bad_arguments", f"{call.where}.arguments", f"a {type(args).__name__}, not an object"
        )
    return args


def _checked_name(call: RawCall, names: set[str]) -> str:
    if not isinstance(call.name, str) or not call.name:
        raise RowReject("bad_arguments", f"{call.where}.name", "a call needs a tool name")
    if call.name not in names:
        raise RowReject("unknown_tool", f"{call.where}.name", f"{call.name!r} is not offered")
    return call.name


def _context(turns: list[Turn], names: set[str]) -> list[Message]:
    out = []
    for t in turns:
        if t.role == "assistant":
            calls = [
                ContextCall(name=_checked_name(c, names), arguments=arguments_of(c))
                for c in t.calls
            ]
            out.append(Message(role="assistant", content=t.content, tool_calls=calls or None))
        elif t.role == "tool":
            out.append(Message(role="tool", content=t.content, name=t.name))
        else:
            out.append(Message(role=t.role, content=t.content))
    return out


def _gold(steps: list[list[RawCall]], names: set[str]) -> list[list[Call]]:
    return [
        [
            Call(
                name=_checked_name(c, names),
                arguments=arguments_of(c) if c.arguments_known else {},
                arguments_known=c.arguments_known,
            )
            for c in step
        ]
        for step in steps
    ]


def _schema_problem(
    toolset: ToolSet, raw_gold: list[list[RawCall]], gold: list[list[Call]]
) -> None:
    """A gold call whose arguments fail its tool's schema (one the source gives no
    arguments for has none to check)."""
    for step, raw_step in zip(gold, raw_gold):
        for call, raw in zip(step, raw_step):
            if not call.arguments_known:
                continue
            error = _first_error(toolset.validators[call.name], call.arguments)
            if error is not None:
                path, message = error
                where = f"{raw.where}.arguments" + (f".{path}" if path else "")
                raise RowReject("schema_mismatch", where, f"{call.name}: {message}")


def _record(
    conv: Conversation,
    toolset: ToolSet,
    context: list[Message],
    gold: list[list[Call]],
    answer: str | None,
    task_id: str,
    source: str,
    raw_gold: list[list[RawCall]],
    limits: DataLimits,
) -> TaskRecord:
    try:
        record = TaskRecord(
            id=task_id,
            source=source,
            domain=conv.domain or "default",
            split="train",
            messages=context,
            tools=toolset.tools,
            gold=gold,
            answer=answer or None,
        )
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise RowReject("bad_message", where, describe(e)) from None
    big = task_size_problem(io.row_bytes(io.record_to_row(record)), limits)
    if big is not None:
        raise RowReject("over_limit", f"task {task_id}", big[1])
    _schema_problem(toolset, raw_gold, gold)
    return record


def _check_turns(turns: list[Turn]) -> None:
    """Every turn says something, and every tool result answers a call: a result with
    no call before it would otherwise drop out of its task silently (the turns after
    the user turn answered are not context, and its gold comes from assistant turns)."""
    calling = False  # the latest turn before these tool turns is an assistant's that calls
    before = "it is the first turn"
    for t in turns:
        if t.role not in ("system", "user", "assistant", "tool"):
            raise RowReject("bad_message", t.where, f"unknown role {t.role!r}")
        if t.role == "tool":
            if not calling:
                message = f"a tool result with no call before it ({before})"
                raise RowReject("bad_message", t.where, message)
            continue
        if t.role == "assistant" and not (t.calls or t.content.strip() or t.implied):
            raise RowReject("bad_message", t.where, "an assistant turn without text or calls")
        if t.role == "user" and not t.content.strip():
            raise RowReject("bad_message", t.where, "a user turn without text")
        calling = t.role == "assistant" and bool(t.calls)
        kind = (
            "an assistant turn that calls nothing" if t.role == "assistant" else f"a {t.role} turn"
        )
        before = f"it follows {kind}, {t.where}"
    if not any(t.role == "user" for t in turns):
        raise RowReject("no_user_turn", "messages", "no turn has the role user")


def conversation_tasks(
    conv: Conversation, source: str, row_id: str, limits: DataLimits | None = None
) -> list[TaskRecord]:
    """The tasks of one conversation (ids ``{source}-{row_id}-{k}``, k the user turn's
    index among the conversation's user turns), each within the size ``limits``
    (default: the defaults); raises :class:`RowReject`."""
    limits = limits or DataLimits()
    toolset = tool_set(conv.tools, conv.tools_where, limits)
    if not toolset.tools:
        raise RowReject("no_tools", conv.tools_where, "no tool is offered")
    names = set(toolset.validators)
    _check_turns(conv.turns)
    users = [i for i, t in enumerate(conv.turns) if t.role == "user"]
    # every turn up to the last user turn is some task's context: converted once
    messages = _context(conv.turns[: users[-1] + 1], names)
    if conv.gold is not None:
        k = conv.turn_index if conv.turn_index is not None else len(users) - 1
        context = messages
        steps = [step for step in conv.gold if step]
        task_id = f"{source}-{row_id}-{k}"
        gold = _gold(steps, names)
        return [_record(conv, toolset, context, gold, None, task_id, source, steps, limits)]
    records = []
    for k, u in enumerate(users):
        end = users[k + 1] if k + 1 < len(users) else len(conv.turns)
        replies = [t for t in conv.turns[u + 1 : end] if t.role == "assistant"]
        if not replies:
            continue
        gold = [r.calls for r in replies if r.calls]
        answers = [r.content.strip() for r in replies if not r.calls and r.content.strip()]
        context = messages[: u + 1]
        answer = answers[-1] if answers else None
        task_id = f"{source}-{row_id}-{k}"
        records.append(
            _record(
                conv, toolset, context, _gold(gold, names), answer, task_id, source, gold, limits
            )
        )
    if not records:
        raise RowReject("no_answer", "messages", "no user turn is followed by an assistant turn")
    return records
