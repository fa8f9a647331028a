"""Comparing policy calls with gold calls: loose value equality, argument scores, matching.

Everything here is a pure function of JSON values. Nothing raises on any JSON value,
however deep: comparisons give up (as "not equal") past :data:`MAX_DEPTH` levels.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from slca.data.record import REFERENCE_RE, Call, TaskRecord
from slca.rollout.types import Rollout
from slca.simulator.core import is_error

MAX_DEPTH = 64
"""Deeper values are never loosely equal to anything (bounds recursion)."""

_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_INT_RE = re.compile(r"[+-]?\d+")
_MAX_NUMBER_CHARS = 400


# ----------------------------------------------------------------- loose equality
def _scalar(value: Any) -> tuple[str, Any]:
    """A tagged normal form: strings trimmed and case-folded, numeric strings as numbers,
    'true'/'false' (any case) as booleans; ints and floats share the tag ``num``."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("num", value)
    if isinstance(value, str):
        s = value.strip().casefold()
        if s in ("true", "false"):
            return ("bool", s == "true")
        if len(s) <= _MAX_NUMBER_CHARS and _NUMBER_RE.fullmatch(s):
            return ("num", int(s) if _INT_RE.fullmatch(s) else float(s))
        return ("str", s)
    if value is None:
        return ("null", None)
    return ("other", id(value))


def _numbers_equal(a: int | float, b: int | float) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    except OverflowError:  # an int too large for a float against a float
        return False


def loose_equal(a: Any, b: Any, _depth: int = 0) -> bool:
    """Equality for argument values as a lenient grader sees them.

    Strings are trimmed and case-folded; ``10 == "10" == 10.0``; ``True == "true" ==
    "True"`` (but ``True != 1``); ``None`` only equals ``None``; lists are equal
    element-wise in order and objects key-wise (keys exact), recursively.
    """
    if _depth > MAX_DEPTH:
        return False
    if isinstance(a, list) or isinstance(b, list):
        return (
            isinstance(a, list)
            and isinstance(b, list)
            and len(a) == len(b)
            and all(loose_equal(x, y, _depth + 1) for x, y in zip(a, b))
        )
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and a.keys() == b.keys()
            and all(loose_equal(a[k], b[k], _depth + 1) for k in a)
        )
    ta, va = _scalar(a)
    tb, vb = _scalar(b)
    if ta != tb or ta == "other":
        return False
    return _numbers_equal(va, vb) if ta == "num" else va == vb


def canonical(value: Any) -> str:
    """Sorted-key compact JSON: what "the same arguments" means for duplicates.

    A value that cannot be serialised (too deep, not JSON) gets a key unique to the
    object, so it is never a duplicate of anything else.
    """
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    except (RecursionError, TypeError, ValueError):
        return f"<unserialisable {id(value)}>"


# ----------------------------------------------------------------- policy calls
_NO_RESPONSE: Any = object()


@dataclass(frozen=True)
class PolicyCall:
    """A call the policy wrote, in order, with the simulator's answer when it was executed.

    ``order`` counts parsed calls over the trajectory; ``step`` counts calling turns;
    ``executed`` is the :attr:`ExecutedCall.index` it was run as (None if it was not).
    """

    order: int
    turn: int
    step: int
    name: str
    arguments: dict[str, Any]
    executed: int | None = None
    response: Any = _NO_RESPONSE

    @property
    def has_response(self) -> bool:
        return self.response is not _NO_RESPONSE

    @property
    def succeeded(self) -> bool:
        return self.has_response and not is_error(self.response)


def policy_calls(rollout: Rollout) -> list[PolicyCall]:
    """Every call of every well-formed block of every policy turn, in order.

    The parse is the source of truth for what the policy wrote; executed calls
    (``rollout.calls``) are joined on (turn, position within the turn) to attach
    responses.
    """
    executed: dict[int, list[Any]] = {}
    for call in sorted(rollout.calls, key=lambda c: c.index):
        executed.setdefault(call.turn, []).append(call)
    out: list[PolicyCall] = []
    step = 0
    for t, turn in enumerate(rollout.turns):
        calls = turn.parsed.calls
        if not calls:
            continue
        ran = executed.get(t, [])
        for position, call in enumerate(calls):
            match = ran[position] if position < len(ran) else None
            if match is not None and match.name != call.name:
                match = None
            out.append(
                PolicyCall(
                    order=len(out),
                    turn=t,
                    step=step,
                    name=call.name,
                    arguments=call.arguments,
                    executed=None if match is None else match.index,
                    response=_NO_RESPONSE if match is None else match.response,
                )
            )
        step += 1
    return out


# ----------------------------------------------------------------- gold calls
@dataclass(frozen=True)
class GoldCall:
    """A gold call with its place: ``order`` counts gold calls over all steps."""

    order: int
    step: int
    call: Call

    @property
    def name(self) -> str:
        return self.call.name

    def candidates(self, key: str) -> list[Any]:
        """Accepted values of ``key``: BFCL's list when there is one, else the gold value."""
        accepted = self.call.accepted
        if accepted is not None and key in accepted:
            return list(accepted[key])
        return [self.call.arguments[key]] if key in self.call.arguments else []

    @property
    def keys(self) -> set[str]:
        return set(self.call.arguments) | set(self.call.accepted or {})

    @property
    def optional_keys(self) -> set[str]:
        """Keys that may be omitted: ``""`` is among their accepted values."""
        return {k for k, values in (self.call.accepted or {}).items() if _has_omit(values)}


def _has_omit(values: Iterable[Any]) -> bool:
    return any(isinstance(v, str) and v == "" for v in values)


def gold_calls(task: TaskRecord) -> list[GoldCall]:
    out: list[GoldCall] = []
    for s, step in enumerate(task.gold):
        for call in step:
            out.append(GoldCall(order=len(out), step=s, call=call))
    return out


# ----------------------------------------------------------------- references
def resolve_path(value: Any, path: str) -> tuple[bool, Any]:
    """Follow ``.field.0.other`` (or ``[0]``) into a JSON value; ``(found, value)``."""
    parts = [p for p in re.split(r"\.|\[(\d+)\]", path) if p]
    current = value
    for part in parts[:MAX_DEPTH]:
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return False, None
    return True, current


MAX_REFERENCE_CANDIDATES = 16
"""A reference is resolved against at most this many latest earlier calls of its tool."""


class References:
    """What ``$label.path$`` in the gold may resolve to for the calls of one turn:
    the successful responses of the policy's own calls, of the labelled tool, made in
    earlier turns (the latest :data:`MAX_REFERENCE_CANDIDATES` of them)."""

    def __init__(self, label_tools: dict[str, str], calls: Sequence[PolicyCall], turn: int):
        self.label_tools = label_tools
        self.turn = turn
        self._by_tool: dict[str, list[PolicyCall]] = {}
        for call in calls:  # calls come in turn order
            if call.succeeded:
                self._by_tool.setdefault(call.name, []).append(call)
        self._turns = {name: [c.turn for c in cs] for name, cs in self._by_tool.items()}
        self._cache: dict[tuple[str, int], list[Any]] = {}

    def at(self, turn: int) -> References:
        """The same index, seen from ``turn``."""
        view = References.__new__(References)
        view.__dict__.update(self.__dict__)
        view.turn = turn
        return view

    def resolve(self, reference: str) -> list[Any]:
        key = (reference, self.turn)
        if key in self._cache:
            return self._cache[key]
        m = REFERENCE_RE.match(reference)
        tool = self.label_tools.get(m.group("label")) if m else None
        values = []
        if m is not None and tool in self._by_tool:
            end = bisect.bisect_left(self._turns[tool], self.turn)
            for call in self._by_tool[tool][max(0, end - MAX_REFERENCE_CANDIDATES) : end]:
                found, value = resolve_path(call.response, m.group("path").lstrip("."))
                if found:
                    values.append(value)
        self._cache[key] = values
        return values


NO_REFERENCES = References({}, (), 0)


def label_tools(task: TaskRecord) -> dict[str, str]:
    return {c.label: c.name for step in task.gold for c in step if c.label}


# ----------------------------------------------------------------- argument scores
def _matches(value: Any, gold: Any, refs: References, nested: bool, depth: int = 0) -> bool:
    """Does a predicted value match one gold candidate?

    A whole-string reference matches itself literally or any value it resolves to;
    lists and objects match element-wise with the same rules; with ``nested`` (BFCL),
    a list inside a gold object is a list of accepted values for that field.
    """
    if depth > MAX_DEPTH:
        return False
    if isinstance(gold, str) and REFERENCE_RE.match(gold):
        if isinstance(value, str) and value.strip() == gold:
            return True
        return any(loose_equal(value, r) for r in refs.resolve(gold))
    if loose_equal(value, gold):
        return True
    if isinstance(gold, list):
        return (
            isinstance(value, list)
            and len(value) == len(gold)
            and all(_matches(v, g, refs, nested, depth + 1) for v, g in zip(value, gold))
        )
    if isinstance(gold, dict):
        if not isinstance(value, dict) or not set(value) <= set(gold):
            return False
        for k, g in gold.items():
            if nested and isinstance(g, list):
                if k not in value:
                    if not _has_omit(g):
                        return False
                elif not _matches_any(value[k], g, refs, nested, depth + 1):
                    return False
            elif k not in value or not _matches(value[k], g, refs, nested, depth + 1):
                return False
        return True
    return False


def _matches_any(value: Any, candidates: list[Any], refs, nested: bool, depth: int = 0) -> bool:
    """``value`` equals one accepted candidate, or the candidate list itself."""
    if _matches(value, candidates, refs, False, depth):
        return True
    return any(
        _matches(value, c, refs, nested, depth)
        for c in candidates
        if not (isinstance(c, str) and c == "")
    )


def key_jaccard(arguments: dict[str, Any], gold: GoldCall) -> float:
    """Jaccard of argument keys; an optional gold key counts only when it is used."""
    predicted = set(arguments)
    expected = (gold.keys - gold.optional_keys) | (gold.optional_keys & predicted)
    union = predicted | expected
    return 1.0 if not union else len(predicted & expected) / len(union)


def value_hits(arguments: dict[str, Any], gold: GoldCall, refs: References) -> tuple[int, int]:
    """(matched gold keys, gold keys). A keyless gold call counts as one key, matched.

    A key matches when the predicted value equals an accepted value (loosely), or when
    the key is omitted and may be omitted.
    """
    keys = gold.keys
    if not keys:
        return 1, 1
    nested = gold.call.accepted is not None
    hits = 0
    for k in keys:
        candidates = gold.candidates(k)
        if k not in arguments:
            hits += _has_omit(candidates)
        elif gold.call.accepted is not None and k in gold.call.accepted:
            hits += _matches_any(arguments[k], candidates, refs, nested)
        else:
            hits += any(_matches(arguments[k], c, refs, nested) for c in candidates)
    return hits, len(keys)


# ----------------------------------------------------------------- matching
@dataclass(frozen=True)
class Pair:
    """A matched (policy call, gold call) with its argument scores."""

    pred: PolicyCall
    gold: GoldCall
    key: float
    value_hits: int
    value_total: int

    @property
    def value(self) -> float:
        return self.value_hits / self.value_total


def match_calls(
    calls: Sequence[PolicyCall], golds: Sequence[GoldCall], labels: dict[str, str]
) -> list[Pair]:
    """Greedy one-to-one matching: same name, then the best argument overlap.

    Every same-name pair is scored by (key Jaccard + value share) / 2; pairs are taken
    best first (ties: earlier gold call, then earlier policy call), each call at most once.
    """
    scored: list[tuple[float, int, int, Pair]] = []
    index = References(labels, calls, 0) if labels else NO_REFERENCES
    for p in calls:
        refs = index.at(p.turn) if labels else NO_REFERENCES
        for g in golds:
            if p.name != g.name:
                continue
            key = key_jaccard(p.arguments, g)
            hits, total = value_hits(p.arguments, g, refs)
            pair = Pair(p, g, key, hits, total)
            scored.append((-(key + pair.value) / 2, g.order, p.order, pair))
    scored.sort(key=lambda item: item[:3])
    used_p: set[int] = set()
    used_g: set[int] = set()
    pairs: list[Pair] = []
    for _, g_order, p_order, pair in scored:
        if g_order in used_g or p_order in used_p:
            continue
        used_g.add(g_order)
        used_p.add(p_order)
        pairs.append(pair)
    return pairs
