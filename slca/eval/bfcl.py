"""BFCL v4 scoring with the official checker's verdicts.

A policy's calls on a BFCL task are scored by bfcl-eval's own ``ast_checker`` against
BFCL's own inputs: the original function docs and ``possible_answer`` entry, looked up
in the installed package by the record's original id (``bfcl-<id>``), and the calls in
BFCL's decoded format ``[{name: {argument: value}}]``. Per category this mirrors
``bfcl_eval/eval_checker/eval_runner.py``: irrelevance is right iff the output holds
no call (``_evaluate_single_relevance_entry``); every other category goes through
``ast_checker`` with the category name, which picks simple (exactly one call),
multiple (exactly one call, of the expected function) or parallel (order-free
matching) checking (``_evaluate_single_ast_entry``).

The checker module is loaded as a private copy with a stub for
``bfcl_eval.constants.model_config`` (whose real import pulls in every model handler
and ~30 API clients); see docs/decisions.md, "BFCL checker".
"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
import types
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slca.config.data import BFCL_CATEGORIES, BFCL_MULTI_TURN
from slca.data.record import TaskRecord
from slca.data.sources import bfcl as bfcl_source
from slca.rollout.types import Rollout

#: The single-turn categories scored here: those the importer brings in.
CATEGORIES = BFCL_CATEGORIES
NON_LIVE = ("simple_python", "multiple", "parallel", "parallel_multiple")
LIVE = ("live_simple", "live_multiple")
MULTI_TURN = BFCL_MULTI_TURN

_CHECKER = "bfcl_eval.eval_checker.ast_eval.ast_checker"
_MODEL_CONFIG = "bfcl_eval.constants.model_config"
# The checker consults the model's config only for ``underscore_to_dot`` (models whose
# API forbids "." in names see "a.b" as "a_b"). The policy sees BFCL's names unchanged.
_MODEL = "slca"

_IRRELEVANCE_ERROR = "irrelevance_error:decoder_success"
_DECODER_FAILED = "ast_decoder:decoder_failed"

Calls = Sequence[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class Verdict:
    """The official checker's verdict on one task (``error_type`` None when valid)."""

    category: str
    valid: bool
    error_type: str | None = None
    errors: list[str] = field(default_factory=list)
    task_id: str = ""


class MalformedCall(ValueError):
    """A call block of the policy's output did not parse: the output does not decode."""


@functools.cache
def _ast_checker() -> types.ModuleType:
    """A private copy of bfcl-eval's ``ast_checker`` module, built with a stub model config.

    The stub sits in ``sys.modules`` only while the copy executes its imports, and the
    copy is not registered there, so the real modules stay importable as they are.
    """
    bfcl_source.data_dir()  # a clear MissingSource when bfcl-eval is not installed
    spec = importlib.util.find_spec(_CHECKER)
    if spec is None or spec.loader is None:
        raise ImportError(f"bfcl-eval has no module {_CHECKER} (the checker moved?)")
    module = importlib.util.module_from_spec(spec)
    stub = types.ModuleType(_MODEL_CONFIG)
    stub.MODEL_CONFIG_MAPPING = {_MODEL: types.SimpleNamespace(underscore_to_dot=False)}
    saved = sys.modules.get(_MODEL_CONFIG)
    sys.modules[_MODEL_CONFIG] = stub
    try:
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del sys.modules[_MODEL_CONFIG]
        else:
            sys.modules[_MODEL_CONFIG] = saved
    return module


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@functools.cache
def _official(category: str) -> tuple[dict[str, list], dict[str, list]]:
    """BFCL's function docs and ground truth of one category, by original id."""
    root = bfcl_source.data_dir()
    docs = {e["id"]: e["function"] for e in _jsonl(root / f"BFCL_v4_{category}.json")}
    answers = {}
    if category not in bfcl_source.NO_ANSWER:
        path = root / "possible_answer" / f"BFCL_v4_{category}.json"
        answers = {e["id"]: e["ground_truth"] for e in _jsonl(path)}
    return docs, answers


def _lookup(task: TaskRecord) -> tuple[str, list, list | None]:
    """(original id, function docs, ground truth or None) of a BFCL task."""
    if task.source != bfcl_source.SOURCE:
        raise ValueError(f"task {task.id!r} is not a BFCL task (source {task.source!r})")
    if task.domain not in CATEGORIES:
        raise ValueError(
            f"task {task.id!r}: BFCL category {task.domain!r} is not scored here "
            f"(scored: {', '.join(CATEGORIES)})"
        )
    prefix = f"{bfcl_source.SOURCE}-"
    rid = task.id.removeprefix(prefix)
    docs, answers = _official(task.domain)
    if not task.id.startswith(prefix) or rid not in docs:
        raise KeyError(
            f"task {task.id!r}: id {rid!r} is not in the installed BFCL data "
            f"(BFCL_v4_{task.domain}.json of bfcl-eval)"
        )
    return rid, docs[rid], answers.get(rid)


def decode_calls(calls: Calls) -> list[dict[str, dict[str, Any]]]:
    """The policy's calls, in order, in BFCL's decoded format ``[{name: {arg: value}}]``.

    The importer keeps BFCL's function and argument names unchanged, so nothing is
    mapped back.
    """
    out = []
    for i, (name, arguments) in enumerate(calls):
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise TypeError(f"call {i}: expected (name: str, arguments: dict), got {name!r}")
        out.append({name: dict(arguments)})
    return out


def _errors(errors: Any) -> list[str]:
    items = errors if isinstance(errors, list) else [errors]
    return [e if isinstance(e, str) else json.dumps(e, default=repr) for e in items]


def check(task: TaskRecord, calls: Calls) -> Verdict:
    """The official verdict on ``calls`` (every call the policy made, in order) for ``task``."""
    _, docs, answer = _lookup(task)
    decoded = decode_calls(calls)
    category = task.domain
    if category == "irrelevance":
        if not decoded:
            return Verdict(category, True, task_id=task.id)
        return Verdict(
            category,
            False,
            _IRRELEVANCE_ERROR,
            ["Valid syntax. Successfully decode AST when it should not."],
            task.id,
        )
    checker = _ast_checker()
    language = checker.Language.PYTHON
    try:
        result = checker.ast_checker(docs, decoded, answer, language, category, _MODEL)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as e:
        # The checker assumes well-typed output in places; a crash on odd values is a
        # wrong answer, not a reason to stop an evaluation run.
        return Verdict(category, False, "checker_exception", [f"{type(e).__name__}: {e}"], task.id)
    if result["valid"]:
        return Verdict(category, True, task_id=task.id)
    return Verdict(category, False, result["error_type"], _errors(result["error"]), task.id)


def rollout_calls(rollout: Rollout) -> list[tuple[str, dict[str, Any]]]:
    """Every call the policy wrote over the rollout, in order.

    Read from each turn's parsed blocks: the same calls as ``rollout.calls`` plus those
    of a last turn cut off before its calls ran. Raises :class:`MalformedCall` when a
    block did not parse, since BFCL's decoder then fails on the whole output.
    """
    calls = []
    for t, turn in enumerate(rollout.turns):
        for b, block in enumerate(turn.parsed.blocks):
            if not block.ok:
                raise MalformedCall(
                    f"rollout of {rollout.task_id!r}: turn {t}, call block {b}: "
                    f"{block.error.code}: {block.error.message}"
                )
            calls.extend((c.name, c.arguments) for c in block.calls)
    return calls


def check_rollout(task: TaskRecord, rollout: Rollout) -> Verdict:
    """The verdict on a rollout of ``task``, as BFCL treats an output that fails to decode:
    wrong (``ast_decoder:decoder_failed``), except on irrelevance, where it counts as no
    call."""
    if rollout.task_id != task.id:
        raise ValueError(f"rollout is of task {rollout.task_id!r}, not {task.id!r}")
    try:
        calls = rollout_calls(rollout)
    except MalformedCall as e:
        _lookup(task)
        if task.domain == "irrelevance":
            return Verdict(task.domain, True, task_id=task.id)
        return Verdict(task.domain, False, _DECODER_FAILED, [str(e)], task.id)
    return check(task, calls)


def accuracy(verdicts: Iterable[Verdict]) -> dict[str, float]:
    """Accuracy per category (``bfcl/<category>``) and BFCL's summaries over those present.

    As BFCL's leaderboard: ``bfcl/non_live`` is the unweighted mean of the non-live AST
    categories, ``bfcl/live`` the mean over live tasks (weighted by count),
    ``bfcl/multi_turn`` the mean of the multi-turn categories (here multi_turn_base), and
    ``bfcl/overall`` the unweighted mean of those groups and irrelevance (BFCL v4's
    overall also weighs in its agentic part, not scored here). Absent categories are
    left out of the means, where BFCL would count them as 0.
    """
    right: dict[str, list[bool]] = defaultdict(list)
    for v in verdicts:
        right[v.category].append(v.valid)
    out = {f"bfcl/{c}": sum(r) / len(r) for c, r in sorted(right.items())}
    groups = {}
    non_live = [out[f"bfcl/{c}"] for c in NON_LIVE if c in right]
    if non_live:
        groups["bfcl/non_live"] = sum(non_live) / len(non_live)
    live = [ok for c in LIVE for ok in right.get(c, [])]
    if live:
        groups["bfcl/live"] = sum(live) / len(live)
    if "irrelevance" in right:
        groups["bfcl/irrelevance"] = out["bfcl/irrelevance"]
    multi_turn = [out[f"bfcl/{c}"] for c in MULTI_TURN if c in right]
    if multi_turn:
        groups["bfcl/multi_turn"] = sum(multi_turn) / len(multi_turn)
    if groups:
        out.update(groups)
        out["bfcl/overall"] = sum(groups.values()) / len(groups)
    return out
