"""τ²-bench on its real local environments, scored by τ²'s own evaluators.

Protocol (single agent, no user simulator; docs/decisions.md, "τ²-bench protocol"):

- The agent gets the task as :mod:`slca.data.sources.tau2` imports it: the policy, then
  the user's scenario (or, in telecom, the task's ticket) as one user turn. It never
  talks to a user; its last text is its answer.
- Its calls run on a real environment per rollout (:class:`Tau2Executor`), brought to
  the task's initial state as τ² does (``Environment.set_state``).
- Telecom runs in τ²'s *solo mode*: the user's device tools are the agent's too, so the
  user-side gold actions are the agent's to make.
- :func:`score` replays the calls on a fresh environment and applies τ²'s
  ``EnvironmentEvaluator`` (database hashes vs the gold actions' replay, plus env
  assertions), ``ActionEvaluator`` and ``CommunicateEvaluator``, combined over the
  task's ``reward_basis`` as ``tau2.evaluator.evaluator.evaluate_simulation`` does, less
  ``NL_ASSERTION`` (it needs an LLM judge). That module itself is not imported: it
  imports ``tau2.registry``, which pulls litellm; its three evaluators do not.
"""

from __future__ import annotations

import functools
import json
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slca.data.record import TaskRecord
from slca.data.sources.tau2 import load, set_initial_state
from slca.simulator.core import Counters, error, is_error, scope_key, signature_error

DOMAINS = ("airline", "retail", "telecom")
PREFIX = "tau2-"


class Tau2Error(ValueError):
    """A task id, domain or scope this module cannot resolve."""


@dataclass(frozen=True)
class Tau2Result:
    reward: float
    """The task's reward in [0, 1]: the product over its reward basis (less NL assertions)."""
    db_match: bool | None
    """Agent and user databases equal the gold replay's (None: no criteria to compare)."""
    actions_match: float | None
    """Fraction of the gold actions found among the calls (None: the task has none)."""
    communicate: float | None
    """Fraction of ``communicate_info`` found in the final text (None: the task has none)."""
    info: dict[str, Any] = field(default_factory=dict)
    """Reward basis, what was left out, env assertion outcomes (JSON-able)."""


# ------------------------------------------------------------------ tasks & environments


def parse_task_id(task_id: str) -> tuple[str, str]:
    """``"tau2-<domain>-<τ² task id>"`` → (domain, τ² task id)."""
    if not isinstance(task_id, str) or not task_id.startswith(PREFIX):
        raise Tau2Error(f"{task_id!r} is not a τ² task id (tau2-<domain>-<id>)")
    domain, sep, tid = task_id[len(PREFIX) :].partition("-")
    if domain not in DOMAINS:
        raise Tau2Error(f"task {task_id!r}: unknown τ² domain {domain!r}; known: {DOMAINS}")
    if not sep or not tid:
        raise Tau2Error(f"task {task_id!r} has no τ² task id after the domain")
    return domain, tid


@functools.cache
def _env_module(domain: str) -> Any:
    if domain not in DOMAINS:
        raise Tau2Error(f"unknown τ² domain {domain!r}; known: {DOMAINS}")
    return load(f"tau2.domains.{domain}.environment")


@functools.cache
def _tasks(domain: str) -> dict[str, Any]:
    Task = load("tau2.data_model.tasks").Task
    utils = load(f"tau2.domains.{domain}.utils")
    path = next(getattr(utils, n) for n in dir(utils) if n.endswith("TASK_SET_PATH"))
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    return {t["id"]: Task.model_validate(t) for t in raw}


def official_task(task_id: str) -> Any:
    """τ²'s own ``Task`` for one of our task ids (all of tasks.json, any split)."""
    domain, tid = parse_task_id(task_id)
    task = _tasks(domain).get(tid)
    if task is None:
        raise Tau2Error(f"task {task_id!r}: no τ² {domain} task has id {tid!r}")
    return task


@functools.cache
def _solo(domain: str) -> bool:
    """Whether the domain has user tools, and so is run in τ²'s solo mode."""
    return _env_module(domain).get_environment().user_tools is not None


@functools.cache
def _pristine(domain: str) -> dict[str, tuple[type, dict]]:
    env = _env_module(domain).get_environment()
    dbs = {"db": env.tools.db}
    if env.user_tools is not None:
        dbs["user_db"] = env.user_tools.db
    return {k: (type(db), db.model_dump()) for k, db in dbs.items()}


def new_environment(domain: str, solo_mode: bool = False) -> Any:
    """A fresh ``Environment`` at the domain's pristine database (τ²'s constructor contract)."""
    # Validating the cached dump is ~2x faster than get_environment() reparsing the 7 MB
    # airline db.json, and each score() builds three environments.
    dbs = {k: cls.model_validate(data) for k, (cls, data) in _pristine(domain).items()}
    return _env_module(domain).get_environment(**dbs, solo_mode=solo_mode)


def initial_environment(task_id: str) -> Any:
    """A fresh environment for the task, at its initial state, in the protocol's mode."""
    domain, _ = parse_task_id(task_id)
    task = official_task(task_id)
    env = new_environment(domain, solo_mode=_solo(domain))
    set_initial_state(env, task)
    return env


# ------------------------------------------------------------------ executing calls


def _tool_function(env: Any, name: str) -> Any:
    """The callable ``env.make_tool_call(name, requestor="assistant")`` would run, or None."""
    kits = [env.tools]
    if env.solo_mode and env.user_tools is not None:
        kits.insert(0, env.user_tools)  # make_tool_call's solo routing order
    for kit in kits:
        if kit is not None and kit.has_tool(name):
            return kit.tools[name]
    return None


def _tool_names(env: Any) -> list[str]:
    kits = [env.tools, env.user_tools if env.solo_mode else None]
    return sorted(n for k in kits if k is not None for n in k.tools)


def call_environment(env: Any, name: str, arguments: Any) -> Any:
    """Run one agent call on ``env``; the response as JSON data, or an error object.

    The environment changes exactly as under τ²'s ``Environment.get_response``; only the
    failure is reported as ``{"error": {"code", "message"}}`` (``unknown_tool``,
    ``invalid_arguments`` when the arguments do not fit the tool's signature, and
    ``tool_error`` when the tool itself refuses, e.g. an unknown reservation).
    """
    func = _tool_function(env, name)
    if func is None:
        known = ", ".join(_tool_names(env))
        return error("unknown_tool", f"no tool named {name!r}; this task has: {known}")
    invalid = signature_error(name, func, arguments)
    if invalid is not None:
        return invalid
    try:
        out = env.make_tool_call(name, requestor="assistant", **arguments)
        env.sync_tools()
        text = env.to_json_str(out)
    except Exception as exc:  # the tool's own refusal, reported to the agent like τ² does
        return error("tool_error", f"{name}: {exc}")
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text  # tools that answer with a plain sentence


@dataclass
class Tau2Stats(Counters):
    calls: int = 0
    unknown_tool: int = 0
    invalid_arguments: int = 0
    tool_errors: int = 0
    latency_s: float = 0.0

    def as_metrics(self) -> dict[str, float]:
        """Namespaced metrics (``env/…``), logged by the trainer like the simulator's."""
        errors = self.unknown_tool + self.invalid_arguments + self.tool_errors
        return {
            "env/calls": float(self.calls),
            "env/error_rate": errors / max(self.calls, 1),
            "env/latency_ms": 1e3 * self.latency_s / max(self.calls, 1),
        }


class Tau2Executor:
    """Runs rollout calls on real τ² environments: a drop-in for ``Simulator.execute``.

    One environment per ``scope`` (the rollout loop passes ``(task_id, group)``; a bare
    task id works too), created at the task's initial state on its first call and kept
    until :meth:`release` or :meth:`close`. The ``tools`` argument is ignored: the
    environment itself says which tools exist.
    """

    def __init__(self) -> None:
        self.stats = Tau2Stats()
        self._envs: dict[Any, Any] = {}

    def execute(
        self,
        tools: Sequence[Mapping[str, Any]],
        name: str,
        arguments: Any,
        *,
        context: Mapping[str, Any] | None = None,
        scope: Any = None,
    ) -> Any:
        env = self.environment(scope)
        start = time.perf_counter()
        try:
            response = call_environment(env, name, arguments)
        finally:
            self.stats.calls += 1
            self.stats.latency_s += time.perf_counter() - start
        if is_error(response):
            code = response["error"]["code"]
            if code == "tool_error":
                self.stats.tool_errors += 1
            else:
                setattr(self.stats, code, getattr(self.stats, code) + 1)
        return response

    def environment(self, scope: Any) -> Any:
        """The live environment of ``scope`` (created at the task's initial state)."""
        key = _task_scope(scope)
        env = self._envs.get(key)
        if env is None:
            env = self._envs[key] = initial_environment(key[0])
        return env

    def release(self, scope: Any) -> None:
        """Forget ``scope``'s environment (its next call starts from the initial state)."""
        self._envs.pop(_task_scope(scope), None)

    def close(self) -> None:
        self._envs.clear()

    def __enter__(self) -> Tau2Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _task_scope(scope: Any) -> tuple:
    key = scope_key(scope)
    if not key or not isinstance(key[0], str):
        raise Tau2Error(f"a τ² scope is (task_id, group) or a task id; got {scope!r}")
    parse_task_id(key[0])
    return key


# ------------------------------------------------------------------ scoring


def score(
    task: TaskRecord,
    calls: Sequence[tuple[str, Any]],
    final_text: str = "",
    *,
    finished: bool = True,
) -> Tau2Result:
    """τ²'s reward for an episode: the agent's ``calls`` in order and its final text.

    ``finished=False`` (the rollout hit a turn, token or byte limit) scores 0, as τ²
    scores a simulation that did not end with a stop. Calls whose arguments are not an
    object never reached an environment and are left out of the trajectory.
    """
    message = load("tau2.data_model.message")
    AssistantMessage, ToolCall = message.AssistantMessage, message.ToolCall
    domain, _ = parse_task_id(task.id)
    official = official_task(task.id)
    env = initial_environment(task.id)
    trajectory: list[Any] = []
    for i, (name, arguments) in enumerate(calls):
        if not isinstance(arguments, Mapping):
            continue
        tc = ToolCall(id=f"call_{i}", name=name, arguments=dict(arguments), requestor="assistant")
        trajectory += [AssistantMessage(role="assistant", tool_calls=[tc]), env.get_response(tc)]
    if final_text:
        trajectory.append(AssistantMessage(role="assistant", content=final_text))
    result = evaluate(domain, official, trajectory)
    if not finished:
        return Tau2Result(0.0, None, None, None, {**result.info, "note": "not finished"})
    return result


def evaluate(domain: str, task: Any, trajectory: list[Any]) -> Tau2Result:
    """τ²'s ``evaluate_simulation(..., EvaluationType.ALL)`` less NL assertions."""
    RewardType = load("tau2.data_model.tasks").RewardType
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    crit = task.evaluation_criteria
    if crit is None:
        return Tau2Result(1.0, None, None, None, {"note": "no evaluation criteria"})
    env_info = EnvironmentEvaluator.calculate_reward(
        environment_constructor=functools.partial(new_environment, domain),
        task=task,
        full_trajectory=trajectory,
        solo_mode=_solo(domain),
    )
    action_info = ActionEvaluator.calculate_reward(task=task, full_trajectory=trajectory)
    comm_info = CommunicateEvaluator.calculate_reward(task=task, full_trajectory=trajectory)
    basis = {RewardType(b) for b in crit.reward_basis}
    parts = {
        "env": (basis & {RewardType.DB, RewardType.ENV_ASSERTION}, env_info.reward),
        "action": (basis & {RewardType.ACTION}, action_info.reward),
        "communicate": (basis & {RewardType.COMMUNICATE}, comm_info.reward),
    }
    reward = 1.0
    for used, r in parts.values():
        if used:
            reward *= r
    checks = action_info.action_checks or []
    comms = comm_info.communicate_checks or []
    info = {
        "reward_basis": sorted(b.value for b in basis),
        "breakdown": {k: r for k, (used, r) in parts.items() if used},
        "env_assertions": [bool(c.met) for c in env_info.env_assertions or []],
    }
    if RewardType.NL_ASSERTION in basis or crit.nl_assertions:
        info["not_scored"] = {"nl_assertions": len(crit.nl_assertions or [])}
    return Tau2Result(
        reward=float(reward),
        db_match=env_info.db_check.db_match if env_info.db_check is not None else None,
        actions_match=sum(c.action_match for c in checks) / len(checks) if checks else None,
        communicate=sum(c.met for c in comms) / len(comms) if comms else None,
        info=info,
    )


def replay_gold(task: TaskRecord) -> Tau2Result:
    """:func:`score` of the record's own gold calls, saying its ``communicate_info``."""
    calls = [(c.name, c.arguments) for step in task.gold for c in step]
    return score(task, calls, "\n".join(task.facts.get("communicate_info", [])))


def accuracy(results: Iterable[tuple[str, Tau2Result]]) -> dict[str, float]:
    """Mean reward (pass^1) per domain (``tau2/<domain>``) and over all tasks (``tau2/overall``)."""
    by_domain: dict[str, list[float]] = defaultdict(list)
    for task_id, result in results:
        by_domain[parse_task_id(task_id)[0]].append(result.reward)
    out = {f"tau2/{d}": sum(r) / len(r) for d, r in sorted(by_domain.items())}
    every = [x for r in by_domain.values() for x in r]
    if every:
        out["tau2/overall"] = sum(every) / len(every)
    return out
