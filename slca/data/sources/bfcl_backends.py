"""BFCL multi-turn (``bfcl-eval``): the executable API backends, their function docs as
tool specs, the multi-turn tasks with their ground truth, and BFCL's call strings.

Used by the multi-turn evaluation (:mod:`slca.eval.bfcl_multi_turn`), which runs a
policy's calls on the backends, and by the simulator's fidelity check
(:mod:`slca.simulator.fidelity`), which runs the ground truth on them. A call string is
parsed with :mod:`ast` (a plain name with literal arguments), never evaluated.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from slca.data.sources import SourceError, package_dir, schema_dialect
from slca.data.sources import bfcl as bfcl_source

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
    if name not in BFCL_BACKENDS:
        raise SourceError(f"unknown BFCL backend {name!r}; known: {', '.join(BFCL_BACKENDS)}")
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
        raise SourceError(f"{where}: expected a call string, got {type(text).__name__}")
    if len(text) > MAX_CALL_CHARS:
        raise SourceError(f"{where}: call of {len(text)} chars over the {MAX_CALL_CHARS} limit")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError) as exc:
        raise SourceError(f"{where}: not a call: {exc}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise SourceError(f"{where}: expected name(arguments), got {text[:80]!r}")
    try:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            raise ValueError("*args/**kwargs")
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        raise SourceError(f"{where}: arguments of {node.func.id} are not literals: {exc}") from None
    return node.func.id, args, kwargs


def bfcl_tool_specs(class_name: str) -> list[dict[str, Any]]:
    """A backend's function docs as simulator tool specs (BFCL dialect → JSON Schema)."""
    path = bfcl_source.data_dir() / "multi_turn_func_doc" / BFCL_BACKENDS[class_name][1]
    specs = []
    for n, raw in bfcl_source.read_jsonl(path):
        where = f"{path.name} line {n}"
        try:
            if isinstance(raw, Exception):
                raise raw
            spec = bfcl_source.tool_spec(raw, 0).model_dump()
            if isinstance(raw.get("response"), dict):
                spec["response"] = schema_dialect.to_json_schema(raw["response"], "response")
        except ValueError as exc:  # FieldError names the field
            raise SourceError(f"{where}: {exc}") from None
        specs.append(spec)
    return specs


def bfcl_tasks(category: str = "multi_turn_base") -> Iterator[tuple[str, dict, list]]:
    """(ref, question record, ground truth turns) of one BFCL multi-turn category."""
    root = bfcl_source.data_dir()
    qpath = root / f"BFCL_v4_{category}.json"
    apath = root / "possible_answer" / f"BFCL_v4_{category}.json"
    for p in (qpath, apath):
        if not p.exists():
            raise FileNotFoundError(f"bfcl: {p} not found")
    answers = {}
    for n, a in bfcl_source.read_jsonl(apath):
        if isinstance(a, dict) and isinstance(a.get("id"), str):
            answers[a["id"]] = a
        else:
            raise SourceError(f"{apath.name} line {n}: id: missing or not a string")
    for n, raw in bfcl_source.read_jsonl(qpath):
        ref = f"{qpath.name} line {n}"
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            raise SourceError(f"{ref}: id: missing or not a string")
        answer = answers.get(raw["id"])
        if answer is None:
            raise SourceError(f"{apath.name}: no ground truth for id {raw['id']!r}")
        turns = answer.get("ground_truth")
        if not isinstance(turns, list) or not all(isinstance(t, list) for t in turns):
            raise SourceError(f"{apath.name} (id {raw['id']}): ground_truth: expected turns")
        yield f"{ref} (id {raw['id']})", raw, turns
