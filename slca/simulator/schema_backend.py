"""The ``schema`` backend: deterministic JSON generated from a response schema.

Values respect the schema (types, ``properties``/``required``, ``enum``/``const``,
numeric and length bounds, ``pattern``, arrays with item bounds,
``oneOf``/``anyOf``/``allOf``, local ``$ref``/``$defs``, common ``format``\\ s) and
are consistent with the call and the task:

- a response field named like an argument (or like a top-level key of the task's
  world state) takes that value when it fits the field's schema;
- a response schema node may carry ``x-world``, a JSON-pointer template into the
  task's world state filled in from the arguments (``"/rates/{base}/{target}"``);
  when the pointer resolves to a value that fits, that value is the answer. This is
  how a generated task's gold calls get the answers its ``facts`` state.

Why hand-written and not jsf or hypothesis-jsonschema: both draw from a global or
engine-owned random source (no per-call seed), and both cost milliseconds per
value; the simulator needs thousands of seeded calls per second. ``rstr`` (regex →
string) does the one part that is hard to write well. Every proposal is still
validated against the schema by the simulator, so a keyword this generator only
approximates (``not``, ``if``/``then``, ``uniqueItems`` over small enums) can cost
a retry, never a wrong answer.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
import string
import time
from collections.abc import Mapping
from typing import Any

from rstr.xeger import Xeger

from slca.jsonutil import MISSING, walk
from slca.simulator.backends import CallRequest
from slca.simulator.schema_rules import (
    FORMATS,
    WORDS,
    Fields,
    SchemaGenerationError,
    bounds,
    merge,
    plausible,
    unsupported_keywords,
)

__all__ = [
    "MAX_DEPTH",
    "SOFT_DEPTH",
    "Budget",
    "Generator",
    "SchemaBackend",
    "SchemaGenerationError",
    "unsupported_keywords",
]

MAX_DEPTH = 24
"""Nesting at which generation gives up (recursive ``$ref`` with required recursion)."""
SOFT_DEPTH = 6
"""Past this depth only required properties and minimum array lengths are generated."""


class Budget:
    """What one generation may spend: characters of output (roughly its JSON length)
    and wall time. Overspending raises :class:`SchemaGenerationError`, which the
    simulator turns into a counted ``simulator_failure``."""

    def __init__(self, max_chars: int = 65_536, max_s: float = 2.0):
        self.max_chars, self.max_s = max_chars, max_s
        self.left = max_chars
        self.deadline = time.monotonic() + max_s

    def spend(self, chars: int, path: str) -> None:
        self.left -= chars
        if self.left < 0:
            raise SchemaGenerationError(
                f"{path}: the response would exceed the size limit of {self.max_chars} chars"
            )
        if time.monotonic() > self.deadline:
            raise SchemaGenerationError(
                f"{path}: generation exceeded the time limit of {self.max_s} s"
            )


class _ShortXeger(Xeger):
    """rstr's regex generator with ``*``/``+`` capped at 8 repeats (rstr's cap is 100),
    and every repetition charged to the budget (``(a{100}){100}{100}`` is a million)."""

    def __init__(self, rng: random.Random, budget: Budget):
        super().__init__(rng)
        self.budget = budget

    def _handle_repeat(self, start_range: int, end_range: int, value: Any) -> str:
        # rstr's own caps the upper bound at 100 even when the lower one is above it
        self.budget.spend(start_range, "pattern")  # the least it will repeat
        times = self._random.randint(start_range, min(end_range, max(start_range, 8)))
        return "".join("".join(self._handle_state(i) for i in value) for _ in range(times))

    def _handle_state(self, state: Any) -> Any:
        self.budget.spend(1, "pattern")
        return super()._handle_state(state)


class SchemaBackend:
    """Seeded, schema-driven responses; the simulator's default backend.

    ``max_chars`` and ``max_s`` bound one generation (:class:`Budget`)."""

    name = "schema"

    def __init__(self, max_chars: int = 65_536, max_s: float = 2.0):
        self.max_chars, self.max_s = max_chars, max_s

    def propose(self, request: CallRequest) -> Any:
        response_schema = request.tool.get("response")
        if response_schema is None:
            return {"status": "ok"}
        rng = random.Random(f"{request.seed}:{request.attempt}")
        budget = Budget(self.max_chars, self.max_s)
        if request.attempt:  # a retry must not repeat a bad echo
            value = Generator(response_schema, rng, budget=budget).value()
        else:
            world = request.context.get("world") or {}
            hints = {k: v for k, v in world.items() if not isinstance(v, dict | list)}
            hints.update(request.arguments)
            value = Generator(
                response_schema, rng, hints, world, request.arguments, budget=budget
            ).value()
        # The simulator reads a str proposal as JSON text (what an LLM writes), so a
        # string-typed response (τ²'s "Transfer successful") goes encoded.
        return json.dumps(value) if isinstance(value, str) else value


class Generator:
    """One generation pass over one root schema."""

    def __init__(
        self,
        root: Mapping[str, Any] | bool,
        rng: random.Random,
        hints: Mapping[str, Any] | None = None,
        world: Any = None,
        arguments: Mapping[str, Any] | None = None,
        budget: Budget | None = None,
    ):
        self.root = root
        self.rng = rng
        self.hints = dict(hints or {})
        self.world = world
        self.arguments = dict(arguments or {})
        self.budget = budget or Budget()
        self.xeger = _ShortXeger(rng, self.budget)

    def value(self) -> Any:
        return self.generate(self.root, "$", 0)

    # ------------------------------------------------------------------ dispatch

    def generate(self, schema: Any, path: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise SchemaGenerationError(
                f"{path}: schema nests deeper than {MAX_DEPTH} "
                "(recursive $ref that always recurses?)"
            )
        self.budget.spend(1, path)
        if schema is True or schema == {}:
            return self._word()
        if schema is False:
            raise SchemaGenerationError(f"{path}: schema 'false' accepts no value")
        if not isinstance(schema, Mapping):
            raise SchemaGenerationError(
                f"{path}: a schema must be an object or boolean, got {type(schema).__name__}"
            )
        if "x-world" in schema and self.world:
            found = self._from_world(schema["x-world"])
            if found is not MISSING and plausible(found, schema):
                return copy.deepcopy(found)
        if "$ref" in schema:
            target = self._resolve(schema["$ref"], path)
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return self.generate(merge([target, rest], path) if rest else target, path, depth + 1)
        if "allOf" in schema:
            parts = [self._deref(s, path) for s in schema["allOf"]]
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self.generate(merge([rest, *parts], path), path, depth + 1)
        for key in ("oneOf", "anyOf"):
            if key in schema:
                branches = list(schema[key])
                if not branches:
                    raise SchemaGenerationError(f"{path}: empty {key}")
                rest = {k: v for k, v in schema.items() if k != key}
                branch = self.rng.choice(branches)
                merged = merge([rest, self._deref(branch, path)], path) if rest else branch
                return self.generate(merged, f"{path}<{key}>", depth + 1)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            if not schema["enum"]:
                raise SchemaGenerationError(f"{path}: empty enum accepts no value")
            return self.rng.choice(list(schema["enum"]))
        kind = self._type(schema, path)
        return getattr(self, f"_{kind}")(schema, path, depth)

    def _type(self, schema: Mapping[str, Any], path: str) -> str:
        declared = schema.get("type")
        if isinstance(declared, list):
            if not declared:
                raise SchemaGenerationError(f"{path}: empty type list")
            non_null = [t for t in declared if t != "null"]
            declared = self.rng.choice(non_null or declared)
        if declared is None:
            if "properties" in schema or "required" in schema:
                return "object"
            if "items" in schema or "prefixItems" in schema:
                return "array"
            if any(
                k in schema
                for k in (
                    "minimum",
                    "maximum",
                    "exclusiveMinimum",
                    "exclusiveMaximum",
                    "multipleOf",
                )
            ):
                return "number"
            return "string"
        if declared not in ("object", "array", "string", "integer", "number", "boolean", "null"):
            raise SchemaGenerationError(f"{path}: unknown type {declared!r}")
        return declared

    def _from_world(self, template: Any) -> Any:
        """The world value at the pointer ``template`` filled from the arguments."""
        if not isinstance(template, str) or not template.startswith("/"):
            return MISSING
        try:
            parts = [p.format_map(Fields(self.arguments)) for p in template[1:].split("/")]
        except (KeyError, ValueError, IndexError, AttributeError):
            return MISSING  # an argument the template needs is absent
        return walk(self.world, parts)

    # ------------------------------------------------------------------ refs

    def _resolve(self, ref: Any, path: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaGenerationError(
                f"{path}: only local $ref ('#/...') is supported, got {ref!r}"
            )
        parts = [p.replace("~1", "/").replace("~0", "~") for p in ref[1:].split("/") if p]
        node = walk(self.root, parts)
        if node is MISSING:
            raise SchemaGenerationError(f"{path}: $ref {ref!r} does not resolve")
        return node

    def _deref(self, schema: Any, path: str, hops: int = 0) -> Any:
        while isinstance(schema, Mapping) and set(schema) == {"$ref"}:
            hops += 1
            if hops > MAX_DEPTH:
                raise SchemaGenerationError(f"{path}: $ref cycle")
            schema = self._resolve(schema["$ref"], path)
        return schema

    # ------------------------------------------------------------------ types

    def _object(self, schema: Mapping[str, Any], path: str, depth: int) -> dict[str, Any]:
        properties = schema.get("properties", {}) or {}
        required = list(dict.fromkeys(schema.get("required", []) or []))
        extra_allowed = schema.get("additionalProperties", True) is not False
        missing = [name for name in required if name not in properties]
        if missing and not extra_allowed:
            raise SchemaGenerationError(
                f"{path}: required {missing} not in properties and additionalProperties is false"
            )
        optional = [name for name in properties if name not in required]
        chosen = []
        if depth < SOFT_DEPTH:
            chosen = [name for name in optional if self.rng.random() < 0.6]
            if not required and not chosen and optional:  # APIs rarely answer {}
                chosen = [self.rng.choice(optional)]
        min_props = int(schema.get("minProperties", 0))
        if min_props > self.budget.left:
            raise SchemaGenerationError(
                f"{path}: minProperties {min_props} exceeds the response size limit of "
                f"{self.budget.max_chars} chars"
            )
        while len(required) + len(chosen) < min_props and len(chosen) < len(optional):
            chosen.append(next(n for n in optional if n not in chosen))
        out: dict[str, Any] = {}
        for name in required + chosen:
            sub = properties.get(name, schema.get("additionalProperties", True))
            if sub is True or sub is None:
                sub = {}
            out[name] = self._field(name, sub, f"{path}.{name}", depth + 1)
        extra = 0
        while len(out) < min_props and extra_allowed:
            extra += 1
            self.budget.spend(10, path)
            out[f"field_{extra}"] = self._word()
        if "maxProperties" in schema and len(out) > int(schema["maxProperties"]):
            raise SchemaGenerationError(f"{path}: required properties exceed maxProperties")
        return out

    def _field(self, name: str, schema: Any, path: str, depth: int) -> Any:
        if name in self.hints and plausible(self.hints[name], self._deref(schema, path)):
            return self.hints[name]
        return self.generate(schema, path, depth)

    def _array(self, schema: Mapping[str, Any], path: str, depth: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        items = schema.get("items", {})
        if isinstance(items, list):  # draft-4 tuple form
            prefix, items = items, schema.get("additionalItems", {})
        prefix = list(prefix or [])
        lo = int(schema.get("minItems", 0))
        hi = schema.get("maxItems")
        if hi is not None and int(hi) < lo:
            raise SchemaGenerationError(f"{path}: minItems {lo} > maxItems {hi}")
        hi = int(hi) if hi is not None else lo + 3
        if lo > self.budget.left:  # each item takes at least a character
            raise SchemaGenerationError(
                f"{path}: minItems {lo} exceeds the response size limit of "
                f"{self.budget.max_chars} chars"
            )
        if items is False:
            hi = min(hi, len(prefix))
            if hi < lo:
                raise SchemaGenerationError(
                    f"{path}: minItems {lo} > the {len(prefix)} prefixItems allowed"
                )
        target = lo if depth >= SOFT_DEPTH else self.rng.randint(lo, max(lo, min(hi, lo + 3)))
        target = max(target, min(len(prefix), hi))
        out: list[Any] = []
        unique = bool(schema.get("uniqueItems"))
        for index in range(target):
            sub = prefix[index] if index < len(prefix) else items
            value = self.generate(sub if sub is not True else {}, f"{path}[{index}]", depth + 1)
            for _ in range(8):
                if not unique or value not in out:
                    break
                value = self.generate(sub, f"{path}[{index}]", depth + 1)
            out.append(value)
        return out

    def _string(self, schema: Mapping[str, Any], path: str, depth: int) -> str:
        lo = int(schema.get("minLength", 0))
        hi = schema.get("maxLength")
        if hi is not None and int(hi) < lo:
            raise SchemaGenerationError(f"{path}: minLength {lo} > maxLength {hi}")
        if lo > self.budget.left:
            raise SchemaGenerationError(
                f"{path}: minLength {lo} exceeds the response size limit of "
                f"{self.budget.max_chars} chars"
            )
        fmt = schema.get("format")
        if "pattern" in schema:
            try:
                value = self.xeger.xeger(schema["pattern"])
            except (re.error, ValueError, TypeError, IndexError) as exc:
                raise SchemaGenerationError(
                    f"{path}: cannot generate from pattern {schema['pattern']!r}: {exc}"
                ) from None
        elif fmt in FORMATS:
            value = FORMATS[fmt](self.rng)
        else:
            value = self._word()
        if len(value) < lo and "pattern" not in schema and fmt not in FORMATS:
            value = value + "".join(
                self.rng.choice(string.ascii_lowercase) for _ in range(lo - len(value))
            )
        if hi is not None and len(value) > int(hi) and "pattern" not in schema:
            value = value[: int(hi)]
        self.budget.spend(len(value), path)
        return value

    def _integer(self, schema: Mapping[str, Any], path: str, depth: int) -> int:
        lo, hi = bounds(schema, path, integer=True)
        step = schema.get("multipleOf")
        if step:
            if float(step) != int(step):
                raise SchemaGenerationError(f"{path}: integer multipleOf {step} is not whole")
            step = int(step)
            first, last = math.ceil(lo / step), math.floor(hi / step)
            if first > last:
                raise SchemaGenerationError(f"{path}: no multiple of {step} in [{lo}, {hi}]")
            return self.rng.randint(first, last) * step
        return self.rng.randint(lo, hi)

    def _number(self, schema: Mapping[str, Any], path: str, depth: int) -> float | int:
        if schema.get("multipleOf"):
            step = float(schema["multipleOf"])
            lo, hi = bounds(schema, path, integer=False)
            first, last = math.ceil(lo / step), math.floor(hi / step)
            if first > last:
                raise SchemaGenerationError(f"{path}: no multiple of {step} in [{lo}, {hi}]")
            return self.rng.randint(first, last) * step
        lo, hi = bounds(schema, path, integer=False)
        value = round(self.rng.uniform(lo, hi), 2)
        return min(max(value, lo), hi)

    def _boolean(self, schema: Mapping[str, Any], path: str, depth: int) -> bool:
        return self.rng.random() < 0.5

    def _null(self, schema: Mapping[str, Any], path: str, depth: int) -> None:
        return None

    def _word(self) -> str:
        return self.rng.choice(WORDS)
