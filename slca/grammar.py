"""The output grammar of a policy turn (DESIGN §3): lexing, call parsing, rendering.

A turn is free text with three kinds of tagged regions::

    <think>…</think>                                   reasoning
    <tool_call>{"name": …, "arguments": {…}}</tool_call>  one call
    <tool_call>[{…}, {…}]</tool_call>                   parallel calls in one block

Model output is data: nothing here raises on any ``str``. Malformed blocks
come back as :class:`CallBlock` values carrying a :class:`CallError`, so the
reward layer can score them (format reward) instead of crashing the run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"

# JSON strings stay on one line (JSON forbids raw newlines in them). A closing tag
# inside a string does not end a block, and brackets inside one do not nest. Both
# scans below are linear: every pattern is possessive (no backtracking), and a quote
# that opens no string is passed over in one step, to the point where its string
# fails (every quote before that point is an escaped one whose string fails there
# too), instead of being retried from the next character, which was quadratic.
_STRING_BODY = re.compile(r'"(?:[^"\\\n]++|\\.)*+')
"""From an opening quote, as far as a one-line JSON string can run (no closing quote)."""
_CALL_RUN = re.compile(
    r'(?:[^"<]++|"(?:[^"\\\n]++|\\.)*+"|<(?!' + re.escape(CALL_CLOSE[1:]) + r"))*+"
)
"""Text and whole strings up to a closing tag outside strings or a quote opening none."""
_DEPTH_RUN = re.compile(r'(?:[^"\[\]{}]++|"(?:[^"\\\n]++|\\.)*+")*+')
"""Text and whole strings up to a bracket outside strings or a quote opening none."""
_OPENING = re.compile(re.escape(THINK_OPEN) + "|" + re.escape(CALL_OPEN))
_BRACKETS = re.compile(r"[\[\]{}]")


@dataclass(frozen=True)
class Limits:
    """Size limits applied while parsing model output."""

    max_block_chars: int = 65_536
    """A call block whose JSON is longer than this is rejected as ``oversize`` unparsed."""
    max_json_depth: int = 32
    """Deeper nesting is rejected as ``too_deep`` before ``json.loads`` (which would recurse)."""
    max_calls_per_block: int = 64
    """A parallel block listing more calls than this is rejected as ``oversize``."""


DEFAULT_LIMITS = Limits()

RegionKind = Literal["think", "tool_call", "text"]


@dataclass(frozen=True)
class Region:
    """A lexed region ``text[start:end]``. ``closed`` is False for a tag left open at the end."""

    kind: RegionKind
    start: int
    end: int
    closed: bool = True


def lex_turn(text: str) -> list[Region]:
    """Split a turn into ordered, non-overlapping regions covering ``[0, len(text))``.

    Rules, chosen to match what models really emit:
    - ``<think>`` runs to the next ``</think>``; unclosed, to the end of the turn.
      Tags inside reasoning are not calls (models discuss the format while thinking).
    - ``<tool_call>`` runs to the first ``</tool_call>`` that lies outside a JSON
      string; if none does (looking past at most 8 inside strings), to the first
      one at all; with none, to the end of the turn (``closed=False``).
    - Everything else is ``text``; stray closing tags are plain text.
    Empty text regions are never emitted.
    """
    regions: list[Region] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _OPENING.search(text, pos)
        if m is None:
            regions.append(Region("text", pos, n))
            break
        if m.start() > pos:
            regions.append(Region("text", pos, m.start()))
        if m.group() == THINK_OPEN:
            close = text.find(THINK_CLOSE, m.end())
            end = n if close < 0 else close + len(THINK_CLOSE)
            regions.append(Region("think", m.start(), end, closed=close >= 0))
        else:
            close = _find_call_close(text, m.end())
            end = n if close < 0 else close + len(CALL_CLOSE)
            regions.append(Region("tool_call", m.start(), end, closed=close >= 0))
        pos = end
    return regions


_MAX_CLOSES_IN_STRINGS = 8


def _find_call_close(text: str, start: int) -> int:
    # Looking past at most a few closing tags that sit inside strings keeps lexing
    # linear: without the bound, text like '<tool_call>"</tool_call>"' repeated
    # rescans the rest of the turn for every block. The run is matched only up to the
    # end of the bound's last tag, so one block never reads further than that.
    pos, n, in_strings = start, len(text), 0
    bound = _after_closing_tags(text, start, _MAX_CLOSES_IN_STRINGS)
    while True:
        stop = _CALL_RUN.match(text, pos, bound).end()
        in_strings += text.count(CALL_CLOSE, pos, stop)  # every one there is in a string
        if in_strings >= _MAX_CLOSES_IN_STRINGS or stop == n:
            break
        if text.startswith(CALL_CLOSE, stop):
            return stop
        fails_at = _STRING_BODY.match(text, stop).end()
        if fails_at < n and text[fails_at] == '"':
            # a whole string that the bound cut: it holds the bound's last tag, so the
            # bound is reached inside strings
            break
        # a quote that opens no string: a closing tag before its failure point is outside
        inside = text.find(CALL_CLOSE, stop + 1, fails_at)
        if inside >= 0:
            return inside
        pos = fails_at
    return text.find(CALL_CLOSE, start)


def _after_closing_tags(text: str, start: int, count: int) -> int:
    """The end of the ``count``-th closing call tag at or after ``start`` (or the end)."""
    end = start
    for _ in range(count):
        found = text.find(CALL_CLOSE, end)
        if found < 0:
            return len(text)
        end = found + len(CALL_CLOSE)
    return end


@dataclass(frozen=True)
class ToolCall:
    """One parsed call. ``arguments`` is always a JSON object."""

    name: str
    arguments: dict[str, Any]


ErrorCode = Literal[
    "invalid_json", "bad_shape", "oversize", "too_deep", "unclosed", "invalid_unicode"
]


@dataclass(frozen=True)
class CallError:
    code: ErrorCode
    message: str


@dataclass(frozen=True)
class CallBlock:
    """One ``<tool_call>`` block: its character span, and either calls or an error."""

    start: int
    end: int
    calls: tuple[ToolCall, ...] = ()
    error: CallError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ParsedTurn:
    """A parsed assistant turn.

    ``content`` is the plain text outside reasoning and call blocks, stripped —
    the user-facing answer when the turn is final.
    """

    text: str
    regions: tuple[Region, ...]
    blocks: tuple[CallBlock, ...] = field(default=())
    reasoning: tuple[str, ...] = ()
    content: str = ""

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        """Every call of every well-formed block, in order."""
        return tuple(call for block in self.blocks if block.ok for call in block.calls)

    @property
    def has_call_block(self) -> bool:
        return bool(self.blocks)


def parse_turn(text: str, *, limits: Limits = DEFAULT_LIMITS) -> ParsedTurn:
    """Parse one assistant turn. Never raises for a ``str``."""
    regions = lex_turn(text)
    blocks, reasoning, content = [], [], []
    for region in regions:
        body = text[region.start : region.end]
        if region.kind == "think":
            inner = body[len(THINK_OPEN) :]
            reasoning.append(inner[: -len(THINK_CLOSE)] if region.closed else inner)
        elif region.kind == "tool_call":
            blocks.append(_parse_block(text, region, limits))
        else:
            content.append(body)
    return ParsedTurn(
        text=text,
        regions=tuple(regions),
        blocks=tuple(blocks),
        reasoning=tuple(r.strip() for r in reasoning),
        content="".join(content).strip(),
    )


def _parse_block(text: str, region: Region, limits: Limits) -> CallBlock:
    inner_end = region.end - len(CALL_CLOSE) if region.closed else region.end
    payload = text[region.start + len(CALL_OPEN) : inner_end].strip()

    def fail(code: ErrorCode, message: str) -> CallBlock:
        return CallBlock(region.start, region.end, error=CallError(code, message))

    if not region.closed:
        return fail("unclosed", f"{CALL_OPEN} without {CALL_CLOSE}")
    if len(payload) > limits.max_block_chars:
        return fail("oversize", f"call block of {len(payload)} chars > {limits.max_block_chars}")
    depth = _depth_over(payload, limits.max_json_depth)
    if depth:
        return fail("too_deep", f"JSON nested {depth} deep > {limits.max_json_depth}")
    try:
        value = _DECODER.decode(payload)
    except ValueError as exc:  # JSONDecodeError is a ValueError
        return fail("invalid_json", str(exc))
    items = value if isinstance(value, list) else [value]
    if not items:
        return fail("bad_shape", "empty list of calls")
    if len(items) > limits.max_calls_per_block:
        return fail("oversize", f"{len(items)} calls in one block > {limits.max_calls_per_block}")
    calls = []
    for index, item in enumerate(items):
        call = _as_call(item, limits)
        where = f"call {index}: " if isinstance(value, list) else ""
        if isinstance(call, str):
            return fail("bad_shape", where + call)
        bad = _not_unicode(call.arguments, "arguments") or _not_unicode(call.name, "name")
        if bad is not None:
            # e.g. "\ud800": JSON accepts the escape, UTF-8 cannot encode the result
            return fail("invalid_unicode", f"{where}{bad} holds a lone surrogate")
        calls.append(call)
    return CallBlock(region.start, region.end, calls=tuple(calls))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _depth_over(payload: str, limit: int) -> int:
    """``json_depth(payload)`` when it exceeds ``limit``, else 0 (without scanning when
    too few brackets open to get there)."""
    if payload.count("[") + payload.count("{") <= limit:
        return 0
    depth = json_depth(payload)
    return depth if depth > limit else 0


def _as_call(item: Any, limits: Limits) -> ToolCall | str:
    """A ToolCall, or the reason the item is not one."""
    if not isinstance(item, dict):
        return f"expected an object with 'name' and 'arguments', got {type(item).__name__}"
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        return "'name' must be a non-empty string"
    arguments = item.get("arguments", {})
    if isinstance(arguments, str):
        # OpenAI-style serialised arguments; accepted when they decode to an object.
        if _depth_over(arguments, limits.max_json_depth):
            return f"'arguments' string nests deeper than {limits.max_json_depth}"
        try:
            arguments = _DECODER.decode(arguments)
        except ValueError:
            return "'arguments' is a string that is not JSON"
    if not isinstance(arguments, dict):
        return f"'arguments' must be an object, got {type(arguments).__name__}"
    return ToolCall(name=name.strip(), arguments=arguments)


def _not_unicode(value: Any, path: str) -> str | None:
    """The path of the first string (key or value) in ``value`` that is not encodable
    Unicode text, or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _not_unicode(key, f"{path} key") or _not_unicode(item, f"{path}.{key}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _not_unicode(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def json_depth(payload: str) -> int:
    """Maximum bracket nesting of a JSON text, ignoring brackets inside strings.

    Linear in the length; unbalanced input still gives a finite answer.
    """
    depth = deepest = pos = 0
    n = len(payload)
    while True:
        pos = _DEPTH_RUN.match(payload, pos).end()
        if pos == n:
            return deepest
        if payload[pos] == '"':  # opens no string: brackets up to its failure point count
            fails_at = _STRING_BODY.match(payload, pos).end()
            brackets = [m.group() for m in _BRACKETS.finditer(payload, pos + 1, fails_at)]
            pos = fails_at
        else:
            brackets, pos = [payload[pos]], pos + 1
        for bracket in brackets:
            if bracket in "[{":
                depth += 1
                deepest = max(deepest, depth)
            else:
                depth = max(depth - 1, 0)


def render_tool_call(call: ToolCall) -> str:
    """A call block in the Hermes format the parser reads back."""
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{CALL_OPEN}\n{body}\n{CALL_CLOSE}"


def render_tool_response(payload: Any) -> str:
    """A simulator response as the ``<tool_response>`` block a tool message carries."""
    body = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"{RESPONSE_OPEN}\n{body}\n{RESPONSE_CLOSE}"
