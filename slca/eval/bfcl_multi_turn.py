"""BFCL v4 multi_turn_base, scored by bfcl-eval's own ``multi_turn_checker``.

A task is one BFCL entry: several user turns over a set of stateful Python APIs (a file
system, a trading bot, a vehicle, ...), built from the entry's ``initial_config``. The
policy answers each user turn with as many steps as it likes (each step a turn of
calls; a turn without calls ends the user turn), its calls run on live API instances,
and at the end the checker replays its calls turn by turn beside the ground truth and
compares the instances' states and the calls' results, as
``bfcl_eval/eval_checker/eval_runner.py::_evaluate_single_multi_turn_entry`` does.

BFCL's executor (``multi_turn_utils.execute_multi_turn_func_call``) runs each call
string through ``eval``. Model output is data, so the checker module is loaded as a
private copy whose executor is :func:`execute_calls`: a call string is parsed with
``ast`` (a bare function name; literal arguments only) and dispatched by name to a
public method of the task's API instances (both from
:mod:`slca.data.sources.bfcl_backends`, whose backends the simulator's fidelity check
runs too). Everything else about
the checker runs as shipped. See docs/decisions.md, "BFCL checker".

The entries, function docs and ground truth come from the installed bfcl-eval at
evaluation time; they are not part of the prepared task data.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.util
import json
import sys
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from slca.data.record import Message, TaskRecord, ToolSpec
from slca.data.sources import bfcl as bfcl_source
from slca.data.sources.bfcl_backends import (
    bfcl_instances,
    bfcl_methods,
    bfcl_tasks,
    bfcl_tool_specs,
    parse_call,
)
from slca.eval.bfcl import MULTI_TURN, Verdict
from slca.rollout.types import Rollout
from slca.simulator.core import error, scope_key, signature_error

(CATEGORY,) = MULTI_TURN

_CHECKER = "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker"
_UTILS = "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils"
_MODEL = "slca"
# BFCL's own guard before its eval: calls to these names fail whatever they resolve to.
_BLOCKED = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})
_FORCE_TERMINATED = "multi_turn:force_terminated"


# ------------------------------------------------------------------ BFCL's data


@functools.cache
def _category() -> tuple[dict[str, dict[str, Any]], dict[str, list[list[str]]]]:
    entries, gold = {}, {}
    for _, raw, turns in bfcl_tasks(CATEGORY):
        entries[raw["id"]] = raw
        gold[raw["id"]] = turns
    return entries, gold


def entries() -> dict[str, dict[str, Any]]:
    """multi_turn_base entries by BFCL id (``multi_turn_base_0``, ...)."""
    return _category()[0]


def ground_truth() -> dict[str, list[list[str]]]:
    """Per entry, per user turn, the gold call strings."""
    return _category()[1]


@functools.cache
def _class_tools(class_name: str) -> tuple[ToolSpec, ...]:
    return tuple(ToolSpec(**spec) for spec in bfcl_tool_specs(class_name))


def _bfcl_id(task_id: str) -> str:
    prefix = f"{bfcl_source.SOURCE}-"
    rid = task_id.removeprefix(prefix)
    if not task_id.startswith(prefix) or rid not in entries():
        raise KeyError(
            f"task {task_id!r}: not a BFCL {CATEGORY} id of the installed bfcl-eval "
            f"(BFCL_v4_{CATEGORY}.json)"
        )
    return rid


def _turn_messages(entry: Mapping[str, Any], t: int) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in entry["question"][t]]


def task_record(bfcl_id: str) -> TaskRecord:
    """The entry as a task: its first user turn as the prompt, and as tools every function
    of its involved classes, in order (``populate_test_cases_with_predefined_functions``)."""
    entry = entries()[bfcl_id]
    return TaskRecord(
        id=f"{bfcl_source.SOURCE}-{bfcl_id}",
        source=bfcl_source.SOURCE,
        domain=CATEGORY,
        split="eval",
        messages=[Message(**m) for m in _turn_messages(entry, 0)],
        tools=[tool for c in entry["involved_classes"] for tool in _class_tools(c)],
        gold=[],
        eval_only=True,
    )


def tasks() -> list[TaskRecord]:
    """Every multi_turn_base entry as a task, in id order."""
    return [task_record(rid) for rid in sorted(entries())]


def follow_ups(task_id: str) -> list[list[dict[str, str]]]:
    """The user turns after the first (for ``run_rollouts(follow_ups=...)``)."""
    entry = entries()[_bfcl_id(task_id)]
    return [_turn_messages(entry, t) for t in range(1, len(entry["question"]))]


# ------------------------------------------------------------------ executing calls


def format_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A policy call in BFCL's decoded form (``name(key=value, ...)``, values as literals)."""
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


def new_instances(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Fresh API instances of the entry, at its ``initial_config``."""
    return bfcl_instances(entry["involved_classes"], entry.get("initial_config") or {})


def methods(instances: Mapping[str, Any]) -> dict[str, Any]:
    """Callable public methods by name; BFCL's own guard list is never callable."""
    table = bfcl_methods(instances)
    return {name: method for name, (_, method) in table.items() if name not in _BLOCKED}


def _as_bfcl_result(result: Any) -> str:
    """A call's result as BFCL's executor records it."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def execute_calls(call_strings: Iterable[str], instances: Mapping[str, Any]) -> list[str]:
    """Run call strings on ``instances``; one result string per call, as BFCL records them
    (failures as ``"Error during execution: ..."``). A string is parsed, never run:
    a bare method name with literal arguments (:func:`parse_call`)."""
    table = methods(instances)
    results = []
    for text in call_strings:
        try:
            name, args, kwargs = parse_call(text, "call")
            if name not in table:
                raise NameError(f"name {name!r} is not defined")
            results.append(_as_bfcl_result(table[name](*args, **kwargs)))
        except Exception as e:  # the API's own refusal, recorded as BFCL records it
            results.append(f"Error during execution: {e}")
    return results


class MultiTurnExecutor:
    """Runs rollout calls on the task's live BFCL API instances: a drop-in for
    ``Simulator.execute``. One set of instances per ``scope`` (``(task_id, group)``),
    built at the entry's initial config on its first call. The rollouts of one group
    share a scope, so each must be its own group: evaluate runs one rollout per task."""

    def __init__(self) -> None:
        self._instances: dict[Any, dict[str, Any]] = {}

    def instances(self, scope: Any) -> dict[str, Any]:
        key = scope_key(scope)
        if key not in self._instances:
            self._instances[key] = new_instances(entries()[_bfcl_id(key[0])])
        return self._instances[key]

    def execute(
        self,
        tools: Sequence[Mapping[str, Any]],
        name: str,
        arguments: Any,
        *,
        context: Mapping[str, Any] | None = None,
        scope: Any = None,
    ) -> Any:
        table = methods(self.instances(scope))
        if name not in table:
            return error("unknown_tool", f"no function named {name!r}; see the tool list")
        invalid = signature_error(name, table[name], arguments)
        if invalid is not None:
            return invalid
        try:
            result = table[name](**arguments)
        except Exception as e:  # the API's own refusal, reported to the policy
            return error("tool_error", f"{name}: {e}")
        try:
            return json.loads(json.dumps(result))
        except (TypeError, ValueError):
            return str(result)

    def close(self) -> None:
        self._instances.clear()

    def __enter__(self) -> MultiTurnExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------ the official checker

# The instances of one check() (BFCL keeps them in globals(), keyed by model and entry,
# so they carry from turn to turn of the replay).
_REPLAY: contextvars.ContextVar[dict[tuple[str, str], dict[str, Any]]] = contextvars.ContextVar(
    "bfcl_multi_turn_replay"
)


def _replay_execute(
    func_call_list: list[str],
    initial_config: dict,
    involved_classes: list,
    model_name: str,
    test_entry_id: str,
    long_context: bool = False,
    is_evaL_run: bool = False,
) -> tuple[list[str], dict]:
    """``execute_multi_turn_func_call``'s contract, with :func:`execute_calls` for its eval."""
    registry = _REPLAY.get()
    key = (model_name, test_entry_id)
    if key not in registry:
        registry[key] = bfcl_instances(involved_classes, initial_config)
    instances = registry[key]
    return execute_calls(func_call_list, instances), dict(instances)


@functools.cache
def _checker() -> types.ModuleType:
    """A private copy of ``multi_turn_checker`` whose executor is :func:`_replay_execute`.

    The stub executor module sits in ``sys.modules`` only while the copy imports it, and
    the copy is not registered there, so the real modules stay as they are.
    """
    bfcl_source.data_dir()  # a clear MissingSource when bfcl-eval is not installed
    spec = importlib.util.find_spec(_CHECKER)
    if spec is None or spec.loader is None:
        raise ImportError(f"bfcl-eval has no module {_CHECKER} (the checker moved?)")
    real_utils = importlib.import_module(_UTILS)
    stub = types.ModuleType(_UTILS)
    stub.execute_multi_turn_func_call = _replay_execute
    stub.is_empty_execute_response = real_utils.is_empty_execute_response
    module = importlib.util.module_from_spec(spec)
    sys.modules[_UTILS] = stub
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules[_UTILS] = real_utils
    return module


def check(task_id: str, decoded: Sequence[Sequence[Sequence[str]]]) -> Verdict:
    """The official verdict on the policy's decoded calls: per user turn, per step, the
    call strings (steps without calls left out, as BFCL's evaluator drops them)."""
    rid = _bfcl_id(task_id)
    gold = ground_truth()[rid]
    if len(decoded) != len(gold):
        return Verdict(
            CATEGORY,
            False,
            _FORCE_TERMINATED,
            [f"the policy answered {len(decoded)} of {len(gold)} user turns"],
            task_id,
        )
    token = _REPLAY.set({})
    try:
        result = _checker().multi_turn_checker(
            [[list(step) for step in turn] for turn in decoded],
            gold,
            entries()[rid],
            CATEGORY,
            _MODEL,
        )
    finally:
        _REPLAY.reset(token)
    if result["valid"]:
        return Verdict(CATEGORY, True, task_id=task_id)
    message = result.get("error_message", "")
    return Verdict(CATEGORY, False, result["error_type"], [str(message)], task_id)


def decode_rollout(rollout: Rollout) -> list[list[list[str]]]:
    """The rollout's calls per user turn, per step, in BFCL's decoded form.

    A turn with a malformed call block does not decode, and BFCL's evaluator skips such
    a step; turns without calls are not steps. Only user turns the policy finished
    (answered with a turn without calls) count: a rollout cut off by a limit has
    answered fewer turns than the entry has, which BFCL scores as force-terminated.
    """
    answered = sum(t.final for t in rollout.turns)
    decoded: list[list[list[str]]] = [[] for _ in range(answered)]
    for turn in rollout.turns:
        if turn.user_turn >= answered or not turn.parsed.blocks:
            continue
        if not all(block.ok for block in turn.parsed.blocks):
            continue
        step = [format_call(c.name, c.arguments) for b in turn.parsed.blocks for c in b.calls]
        if step:
            decoded[turn.user_turn].append(step)
    return decoded


def check_rollout(task: TaskRecord, rollout: Rollout) -> Verdict:
    if rollout.task_id != task.id:
        raise ValueError(f"rollout is of task {rollout.task_id!r}, not {task.id!r}")
    return check(task.id, decode_rollout(rollout))


def replay_gold(task_id: str) -> Verdict:
    """The verdict on the ground truth itself, each user turn's calls as one step."""
    gold = ground_truth()[_bfcl_id(task_id)]
    return check(task_id, [[turn] if turn else [] for turn in gold])
