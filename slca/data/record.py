"""The one task record that every source is converted into.

A record is what a rollout needs to pose a task and what the reward layer needs to
score it: the prompt (``messages``), the APIs on offer (``tools``, OpenAI function
objects plus a ``response`` JSON Schema), the ground truth (``gold``: steps of
parallel calls) and the key facts a good final answer states (``facts``).

The JSON Schema of :class:`TaskRecord` is exported to ``slca/data/task.schema.json``
(``python -m slca.data.record --write``); a test keeps the file in step with the model.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_PATH = Path(__file__).with_name("task.schema.json")

#: In-domain splits (training experiments) and the one split for out-of-domain eval sets.
IN_DOMAIN_SPLITS = ("train", "val", "test")
EVAL_SPLIT = "eval"
SPLITS = (*IN_DOMAIN_SPLITS, EVAL_SPLIT)

#: ``$var1.skyId$``: the value of field ``skyId`` of the result labelled ``var1``
#: (NESTFUL's notation). A whole argument value of this form is a reference, not a literal.
REFERENCE_RE = re.compile(r"^\$(?P<label>[A-Za-z_][A-Za-z0-9_]*)(?P<path>(\.[^$]+)?)\$$")

_NAME_RE = r"^\S+$"  # sources use dots and parentheses: keep names as they are


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ContextCall(_Strict):
    """A call an earlier assistant turn of the conversation made (context, not gold)."""

    name: str = Field(description="The tool called.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Its arguments.")


class Message(_Strict):
    """One prompt turn. The turns the policy answers for are never stored here: they
    are the gold. Earlier assistant and tool turns of an imported conversation are
    context, rendered through the chat template like the policy's own turns."""

    role: Literal["system", "user", "assistant", "tool"] = Field(
        description="Who speaks: system, user, or (context only) assistant and tool."
    )
    content: str = Field(description="The turn's text (a tool turn: the tool's result).")
    tool_calls: list[ContextCall] | None = Field(
        default=None,
        description="An assistant context turn's calls, in order (parallel calls in one "
        "turn); null otherwise.",
    )
    name: str | None = Field(
        default=None, description="A tool turn's tool name; null for other roles."
    )

    @model_validator(mode="after")
    def _fields_fit_role(self) -> Message:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"tool_calls on a {self.role} turn (only assistant turns call)")
        if self.name is not None and self.role != "tool":
            raise ValueError(f"name on a {self.role} turn (only tool turns carry one)")
        return self


class ToolSpec(_Strict):
    """An API on offer: OpenAI function object fields plus the response schema."""

    name: str = Field(pattern=_NAME_RE, description="Function name the policy calls.")
    description: str = Field(default="", description="What the API does.")
    parameters: dict[str, Any] = Field(
        description="JSON Schema (an object schema) of the call's arguments."
    )
    response: dict[str, Any] | None = Field(
        default=None,
        description="JSON Schema of what the API returns; null when the source has none.",
    )

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type", "object") != "object":
            raise ValueError(f"parameters must be an object schema, got type {v.get('type')!r}")
        return v


class Call(_Strict):
    """One gold call."""

    name: str = Field(description="Name of one of the task's tools.")
    arguments: dict[str, Any] = Field(
        default_factory=dict,
        description="Argument values. A whole value '$label.path$' refers to an earlier "
        "call's result (see label).",
    )
    label: str | None = Field(
        default=None,
        description="Name under which later calls refer to this call's result "
        "('$label.field$'); null when nothing refers to it.",
    )
    arguments_known: bool = Field(
        default=True,
        description="False when the source names the tool but not its arguments (the "
        "authors' verl data): 'arguments' is then empty and argument rewards skip the "
        "call instead of scoring against arguments nobody knows.",
    )
    accepted: dict[str, list[Any]] | None = Field(
        default=None,
        description="Every accepted value per argument when the source lists several "
        "(BFCL); an empty string among them means the argument may be omitted. "
        "'arguments' then holds the first accepted value.",
    )


class TaskRecord(_Strict):
    """One tool-calling task, whatever its source."""

    id: str = Field(min_length=1, description="Unique across the whole dataset.")
    source: str = Field(
        min_length=1,
        description="Where it came from: synth, nestful, bfcl, tau2, or an import's name.",
    )
    domain: str = Field(
        min_length=1, description="API family or benchmark category within the source."
    )
    split: Literal["train", "val", "test", "eval"] = Field(
        description="train/val/test (in-domain) or eval (out-of-domain eval sets)."
    )
    messages: list[Message] = Field(
        min_length=1,
        description="Prompt turns, ending with the user turn the policy answers; earlier "
        "user, assistant and tool turns of a conversation are its context.",
    )
    tools: list[ToolSpec] = Field(description="APIs on offer; names unique.")
    gold: list[list[Call]] = Field(
        description="Ground truth: steps in order, each a non-empty list of calls that may "
        "run in parallel. An empty list means no call is needed."
    )
    facts: dict[str, Any] = Field(
        default_factory=dict,
        description="Key facts a good final answer states (name -> value); may be empty.",
    )
    world: dict[str, Any] | None = Field(
        default=None,
        description="Seeded world state the APIs answer from (generator only); null for "
        "real sources.",
    )
    eval_only: bool = Field(default=False, description="Never to be trained on (benchmarks).")
    answer: str | None = Field(
        default=None,
        description="A reference final answer to the user, where the source has one "
        "(imported data); summary scorers may compare with it. Null otherwise.",
    )

    @field_validator("messages")
    @classmethod
    def _has_user_turn(cls, v: list[Message]) -> list[Message]:
        if not any(m.role == "user" for m in v):
            raise ValueError("needs at least one user turn")
        if v[-1].role != "user":
            raise ValueError(f"must end with the user turn the policy answers, not {v[-1].role}")
        for i, m in enumerate(v):
            if m.role == "tool" and (i == 0 or v[i - 1].role not in ("assistant", "tool")):
                raise ValueError(f"turn {i}: a tool turn must follow an assistant or tool turn")
        return v

    @field_validator("tools")
    @classmethod
    def _unique_tool_names(cls, v: list[ToolSpec]) -> list[ToolSpec]:
        seen: set[str] = set()
        for t in v:
            if t.name in seen:
                raise ValueError(f"duplicate tool name {t.name!r}")
            seen.add(t.name)
        return v

    @field_validator("gold")
    @classmethod
    def _no_empty_step(cls, v: list[list[Call]]) -> list[list[Call]]:
        for i, step in enumerate(v):
            if not step:
                raise ValueError(f"step {i} is empty (use gold=[] for a no-call task)")
        return v

    @model_validator(mode="after")
    def _gold_names_tools(self) -> TaskRecord:
        names = {t.name for t in self.tools}
        for i, step in enumerate(self.gold):
            for j, call in enumerate(step):
                if call.name not in names:
                    raise ValueError(
                        f"gold[{i}][{j}] calls {call.name!r}, which is not among the task's tools"
                    )
        if self.eval_only and self.split != EVAL_SPLIT:
            raise ValueError(f"eval_only record in split {self.split!r}")
        return self

    @property
    def n_calls(self) -> int:
        return sum(len(s) for s in self.gold)

    def user_text(self) -> str:
        """All user turns, joined."""
        return "\n".join(m.content for m in self.messages if m.role == "user")

    def conversation_text(self) -> str:
        """The conversation's first user turn: what near-duplicate grouping compares, so
        every task cut from one conversation (whose later tasks hold the earlier ones'
        answers as context) lands in one split. Single-turn tasks: their request."""
        return next(m.content for m in self.messages if m.role == "user")


def record_json_schema() -> dict[str, Any]:
    return TaskRecord.model_json_schema()


def schema_text() -> str:
    return json.dumps(record_json_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--write"]:
        SCHEMA_PATH.write_text(schema_text())
        print(f"wrote {SCHEMA_PATH}")
        return 0
    if argv == ["--check"]:
        ok = SCHEMA_PATH.exists() and SCHEMA_PATH.read_text() == schema_text()
        print("up to date" if ok else f"{SCHEMA_PATH} is stale: run with --write")
        return 0 if ok else 1
    print("usage: python -m slca.data.record --write|--check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
