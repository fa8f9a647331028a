"""SGLS, the schema-guided simulator of tool APIs (DESIGN §5).

``Simulator.call(tool, arguments)`` answers like an API would:

- invalid calls (arguments not an object, too large or deep, or failing the
  tool's ``parameters`` schema) get ``{"error": {"code": "invalid_arguments",
  "message": …}}`` naming the failing path, without asking any backend;
- valid calls get a response proposed by the backend (``schema`` or ``llm``);
  every proposal is validated against the tool's ``response`` schema, an
  invalid one is retried, and after ``max_retries`` it becomes a
  ``simulator_failure`` error (counted in ``sim/failure_rate``); the schema
  backend's work is bounded by the response size limit and a time limit, so a
  hostile schema (``minItems: 1e9``) is such a failure, not a hang;
- identical calls in one scope (a rollout group, a task) get identical
  responses, so execution rewards never differ by simulator noise.

Tool specs are treated as immutable once passed in (compiled validators and
hashes are cached per tool object).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Self

import jsonschema_rs

from slca.grammar import json_depth
from slca.jsonutil import canonical_json
from slca.simulator.backends import Backend, CallRequest
from slca.simulator.schema_backend import SchemaBackend, unsupported_keywords

ERROR_CODES = ("unknown_tool", "invalid_arguments", "simulator_failure")


def error(code: str, message: str) -> dict[str, Any]:
    """The structured error object every failure is reported as."""
    return {"error": {"code": code, "message": message}}


def is_error(response: Any) -> bool:
    return (
        isinstance(response, dict)
        and set(response) == {"error"}
        and isinstance(response["error"], dict)
        and "code" in response["error"]
    )


def signature_error(name: str, function: Any, arguments: Any) -> dict[str, Any] | None:
    """The ``invalid_arguments`` error of calling a real tool ``function`` (τ², BFCL)
    with ``arguments``, or None when they are a JSON object that fits its signature;
    the function is not called."""
    if not isinstance(arguments, Mapping):
        return error(
            "invalid_arguments",
            f"{name}: arguments must be a JSON object, got {type(arguments).__name__}",
        )
    try:
        inspect.signature(function).bind(**arguments)
    except TypeError as exc:
        return error("invalid_arguments", f"{name}: {exc}")
    return None


def scope_key(scope: Any) -> tuple:
    """An executor's ``scope`` as a tuple: ``(task_id, group)`` as the rollout loop passes
    it, or a bare task id as ``(task_id,)``."""
    return tuple(scope) if isinstance(scope, tuple | list) else (scope,)


@dataclass
class Counters:
    """An executor's counters (a dataclass of numbers, all defaulted): reset before
    each step's sampling, summed over the ranks of a step."""

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)

    @classmethod
    def total(cls, parts: Sequence[Self]) -> Self:
        """One set of counters holding the sum of ``parts``'."""
        return cls(**{f.name: sum(getattr(p, f.name) for p in parts) for f in fields(cls)})


@dataclass(frozen=True)
class SimulatorLimits:
    max_argument_chars: int = 65_536
    """Canonical JSON of the arguments longer than this is an ``invalid_arguments`` error."""
    max_json_depth: int = 32
    """Arguments or responses nested deeper than this are rejected."""
    max_response_chars: int = 65_536
    """A backend proposal longer than this is invalid (and retried)."""
    max_retries: int = 2
    """Invalid proposals retried before the call becomes a ``simulator_failure``."""
    max_generation_s: float = 2.0
    """Wall time one proposal of the schema backend may take; a schema that needs more
    (a huge ``pattern`` repeat, say) fails the attempt as over the limit."""


@dataclass
class SimulatorStats(Counters):
    calls: int = 0
    """Every call, valid or not."""
    cache_hits: int = 0
    unknown_tool: int = 0
    invalid_arguments: int = 0
    proposals: int = 0
    """Backend proposals, retries included."""
    invalid: int = 0
    """Proposals that were not valid JSON or failed the response schema."""
    retries: int = 0
    failures: int = 0
    """Valid calls that ended as ``simulator_failure``."""
    latency_s: float = 0.0

    def as_metrics(self) -> dict[str, float]:
        """Namespaced metrics (``sim/…``) as the trainer logs them."""
        return {
            "sim/calls": float(self.calls),
            "sim/cache_hit_rate": self.cache_hits / max(self.calls, 1),
            "sim/invalid_rate": self.invalid / max(self.proposals, 1),
            "sim/failure_rate": self.failures / max(self.calls, 1),
            "sim/latency_ms": 1e3 * self.latency_s / max(self.calls, 1),
        }


@dataclass
class _CompiledTool:
    spec: Mapping[str, Any]
    name: str
    digest: str
    arguments: Any  # a jsonschema validator, or an error message
    response: Any  # a jsonschema validator, None (no schema), or an error message


class Simulator:
    """Answers tool calls from schemas; see the module docstring for the contract.

    Args:
        backend: ``"schema"`` (deterministic, default), ``"llm"`` (a language
            model decoding constrained to the response schema; keyword options go
            to :class:`slca.simulator.llm.LLMBackend`), or any :class:`Backend`.
        seed: mixed into every call's seed; same seed + same call → same response.
        limits: size, depth and retry limits.
        cache_path: optional SQLite file; responses persist across runs there.
        cache_size: in-memory entries kept (least recently used are dropped).
    """

    def __init__(
        self,
        backend: str | Backend = "schema",
        *,
        seed: int = 0,
        limits: SimulatorLimits | None = None,
        cache_path: str | Path | None = None,
        cache_size: int = 100_000,
        **backend_options: Any,
    ):
        self.limits = limits or SimulatorLimits()
        self.backend = _make_backend(backend, backend_options, self.limits)
        self.seed = seed
        self.stats = SimulatorStats()
        self._cache: OrderedDict[tuple, str] = OrderedDict()
        self._cache_size = cache_size
        self._tools: dict[int, _CompiledTool] = {}
        self._db = _open_cache(cache_path) if cache_path is not None else None

    # ------------------------------------------------------------------ API

    def execute(
        self,
        tools: Sequence[Mapping[str, Any]],
        name: str,
        arguments: Any,
        *,
        context: Mapping[str, Any] | None = None,
        scope: Any = None,
    ) -> Any:
        """Resolve ``name`` among the task's ``tools`` and call it (``unknown_tool`` if absent)."""
        for tool in tools:
            if _tool_name(tool) == name:
                return self.call(tool, arguments, context=context, scope=scope)
        self.stats.calls += 1
        self.stats.unknown_tool += 1
        known = ", ".join(sorted(_tool_name(t) for t in tools)) or "none"
        return error("unknown_tool", f"no tool named {name!r}; this task has: {known}")

    def call(
        self,
        tool: Mapping[str, Any],
        arguments: Any,
        *,
        context: Mapping[str, Any] | None = None,
        scope: Any = None,
    ) -> Any:
        """The simulated response to calling ``tool`` with ``arguments``."""
        start = time.perf_counter()
        self.stats.calls += 1
        try:
            return self._call(tool, arguments, context, scope)
        finally:
            self.stats.latency_s += time.perf_counter() - start

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> Simulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ steps

    def _call(self, tool, arguments, context, scope) -> Any:
        compiled = self._compile(tool)
        if isinstance(compiled.arguments, str):  # the tool's schema is broken, not the call
            self.stats.failures += 1
            return error("simulator_failure", f"{compiled.name}: {compiled.arguments}")
        canonical, problem = self._check_arguments(compiled, arguments)
        if problem is not None:
            self.stats.invalid_arguments += 1
            return error("invalid_arguments", f"{compiled.name}: {problem}")
        key = (repr(scope), compiled.digest, canonical)
        cached = self._cache_get(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return json.loads(cached)
        response = self._respond(compiled, arguments, canonical, dict(context or {}))
        self._cache_put(key, canonical_json(response))
        return response

    def _compile(self, tool: Mapping[str, Any]) -> _CompiledTool:
        entry = self._tools.get(id(tool))
        if entry is not None and entry.spec is tool:
            return entry
        if not isinstance(tool, Mapping) or not _tool_name(tool):
            raise TypeError(f"a tool spec is a mapping with a 'name'; got {tool!r:.200}")
        name = _tool_name(tool)
        function = tool.get("function", tool)
        parameters = function.get("parameters", {"type": "object"})
        response = tool.get("response", function.get("response"))
        digest = hashlib.sha256(
            canonical_json({"name": name, "parameters": parameters, "response": response}).encode()
        ).hexdigest()[:32]
        entry = _CompiledTool(
            tool,
            name,
            digest,
            _validator(parameters, "parameters"),
            None if response is None else _validator(response, "response"),
        )
        if len(self._tools) > 4096:
            self._tools.clear()
        self._tools[id(tool)] = entry
        return entry

    def _check_arguments(self, compiled: _CompiledTool, arguments: Any) -> tuple[str, str | None]:
        """The canonical JSON of valid arguments, or the problem with them."""
        if not isinstance(arguments, dict):
            return "", f"arguments must be a JSON object, got {type(arguments).__name__}"
        try:
            text = canonical_json(arguments)
        except (TypeError, ValueError, RecursionError) as exc:
            return "", f"arguments are not JSON: {exc}"
        if not _is_unicode(text):  # "\ud800" decodes from JSON but encodes to no UTF-8
            return "", "arguments are not valid Unicode text (a lone surrogate)"
        limit = self.limits.max_argument_chars
        if len(text) > limit:
            return "", f"arguments are {len(text)} chars, over the {limit} limit"
        if json_depth(text) > self.limits.max_json_depth:
            return "", f"arguments nest deeper than {self.limits.max_json_depth}"
        return text, _first_error(compiled.arguments, arguments)

    def _respond(
        self, compiled: _CompiledTool, arguments: dict, canonical: str, context: dict[str, Any]
    ) -> Any:
        if isinstance(compiled.response, str):
            self.stats.failures += 1
            return error("simulator_failure", f"{compiled.name}: {compiled.response}")
        seed = int(
            hashlib.sha256(f"{self.seed}|{compiled.digest}|{canonical}".encode()).hexdigest()[:16],
            16,
        )
        problem = "no attempt made"
        for attempt in range(self.limits.max_retries + 1):
            if attempt:
                self.stats.retries += 1
            self.stats.proposals += 1
            request = CallRequest(compiled.spec, arguments, context, seed, attempt)
            try:
                proposal = self.backend.propose(request)
                response, problem = self._check_response(compiled, proposal)
            except Exception as exc:  # a backend failure must never kill the rollout
                response, problem = None, f"{type(exc).__name__}: {exc}"
            if problem is None:
                return response
            self.stats.invalid += 1
        self.stats.failures += 1
        hint = unsupported_keywords(compiled.spec.get("response"))
        note = f" (schema uses keywords generated approximately: {hint})" if hint else ""
        return error(
            "simulator_failure",
            f"{compiled.name}: no valid response after "
            f"{self.limits.max_retries + 1} attempts: {problem}{note}",
        )

    def _check_response(self, compiled: _CompiledTool, proposal: Any) -> tuple[Any, str | None]:
        if isinstance(proposal, str | bytes):
            text = proposal.decode("utf-8", "replace") if isinstance(proposal, bytes) else proposal
            if len(text) > self.limits.max_response_chars:
                return None, f"response of {len(text)} chars over the limit"
            if json_depth(text) > self.limits.max_json_depth:  # before json.loads recurses
                return None, f"response nests deeper than {self.limits.max_json_depth}"
            try:
                proposal = json.loads(text)
            except ValueError as exc:
                return None, f"response is not JSON: {exc}"
        try:
            text = canonical_json(proposal)
        except (TypeError, ValueError, RecursionError) as exc:
            return None, f"response is not JSON-serialisable: {exc}"
        if len(text) > self.limits.max_response_chars:
            return None, f"response of {len(text)} chars over the limit"
        if json_depth(text) > self.limits.max_json_depth:
            return None, f"response nests deeper than {self.limits.max_json_depth}"
        if not _is_unicode(text):
            return None, "response is not valid Unicode text (a lone surrogate)"
        if compiled.response is not None:
            problem = _first_error(compiled.response, proposal)
            if problem is not None:
                return None, f"response does not match its schema: {problem}"
        return proposal, None

    # ------------------------------------------------------------------ cache

    def _cache_get(self, key: tuple) -> str | None:
        value = self._cache.get(key)
        if value is not None:
            self._cache.move_to_end(key)
            return value
        if self._db is not None:
            row = self._db.execute(
                "SELECT value FROM responses WHERE key = ?", (self._db_key(key),)
            ).fetchone()
            if row is not None:
                self._remember(key, row[0])
                return row[0]
        return None

    def _cache_put(self, key: tuple, value: str) -> None:
        self._remember(key, value)
        if self._db is not None:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)",
                (self._db_key(key), value),
            )

    def _remember(self, key: tuple, value: str) -> None:
        self._cache[key] = value
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def _db_key(self, key: tuple) -> str:
        raw = "\x1f".join([self.backend.name, str(self.seed), *key])
        return hashlib.sha256(raw.encode()).hexdigest()


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _tool_name(tool: Mapping[str, Any]) -> str | None:
    function = tool.get("function", tool) if isinstance(tool, Mapping) else {}
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) and name else None


def _validator(schema: Any, what: str) -> Any:
    """A compiled validator for ``schema``, or a message saying why it is not a schema.

    jsonschema-rs (Rust) validates ~80x faster than the pure-Python jsonschema,
    which is what lets the simulator answer thousands of calls per second.
    """
    try:
        return jsonschema_rs.validator_for(schema, validate_formats=True)
    except jsonschema_rs.ValidationError as exc:
        where = _json_path(exc.instance_path)
        return f"{what} is not a valid JSON Schema at {where}: {exc.message}"
    except Exception as exc:  # unresolvable $ref, unknown $schema, …
        return f"{what} is not a usable JSON Schema: {exc}"


def _first_error(validator: Any, instance: Any) -> str | None:
    try:
        found = next(validator.iter_errors(instance), None)
    except Exception as exc:  # e.g. a $ref that only fails to resolve while validating
        return f"schema cannot be applied: {type(exc).__name__}: {exc}"
    if found is None:
        return None
    return f"{_json_path(found.instance_path)}: {found.message}"


def _json_path(parts: Sequence[Any]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _make_backend(
    backend: str | Backend, options: Mapping[str, Any], limits: SimulatorLimits
) -> Backend:
    if backend == "schema":
        if options:
            raise TypeError(f"the schema backend takes no options; got {sorted(options)}")
        # generation stops at the response limit (a longer answer is refused anyway)
        return SchemaBackend(max_chars=limits.max_response_chars, max_s=limits.max_generation_s)
    if backend == "llm":
        from slca.simulator.llm import LLMBackend  # torch/transformers only when asked

        return LLMBackend(**options)
    if isinstance(backend, str):
        raise ValueError(f"unknown simulator backend {backend!r}; valid: schema, llm")
    return backend


def _open_cache(path: str | Path) -> sqlite3.Connection:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    return db
