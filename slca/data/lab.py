"""The credit lab's tasks: a tool choice the request cues, and a free summary style.

A lab task asks about the weather on the day a cue word in the request names
(``today`` or ``tomorrow``). Of its two tools exactly one serves that day, so tool
correctness is one discrete choice that the request decides. Neither tool takes
arguments: the tiny policy cannot copy values, and an argument it cannot learn would
blur ``R_tool``. The request ends with a short cue phrase ("right now, today" /
"tomorrow, the next day").

- :func:`lab_tasks` gives RL tasks: the gold call is the cued tool.
- ``lab_tasks(..., demonstrations=True)`` gives SFT demonstrations whose gold tool is
  the cued one for exactly half of each cue's tasks, counterbalanced: a policy trained
  on them picks each tool about half the time whatever the cue, so RL starts at chance
  on the choice. (The SFT stage picks the summary style from its own seeded draw,
  independent of the calls, at ``sft.poor_summary_frac``.)
- ``cues`` chooses which days requests name. With both, the right tool differs from
  request to request and the policy must read the cue; with one (``("today",)``, what
  the credit lab runs), every request names the same day, so the right tool is fixed
  and the choice is a bandit over two tools. The tiny policy does not learn to read the
  cue at RL budgets: after SFT on requests whose cue decided nothing, the choice stayed
  at chance through 30 steps of GRPO at lr 3e-4 and 1e-3, and through 30 supervised
  steps at 3e-4 (docs/decisions.md, "Credit lab").

Every task states one fixed fact, so the SFT stage's reference summary ("Here is what
I found: status is found.") and its poor summary differ
(:func:`slca.rollout.gold.summary_for`): the summary style is a second choice, made by
the summary's first tokens, and the rest of either summary is fixed text.

Everything is drawn from ``random.Random(f"{seed}:{kind}:{index}")``: the output is
identical for the same arguments on any machine. :func:`write_dataset` stores tasks
as a dataset directory the pipeline's stages read (``train.parquet`` + manifest).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slca.data import io
from slca.data.record import Call, Message, TaskRecord, ToolSpec

SOURCE = "lab"
SYSTEM_PROMPT = "You are a helpful assistant with access to tools."
FACT = {"status": "found"}
"""Every task's one fact: the reference summary states it, the poor one does not."""

_NO_ARGUMENTS = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
_REPORT = {
    "type": "object",
    "properties": {
        "temperature": {"type": "integer"},
        "condition": {"type": "string", "enum": ["sunny", "cloudy", "rain", "snow", "windy"]},
    },
    "required": ["condition", "temperature"],
    "additionalProperties": False,
}
TOOLS = {
    "today": ToolSpec(
        name="weather_today",
        description="Today's weather where the user is.",
        parameters=_NO_ARGUMENTS,
        response=_REPORT,
    ),
    "tomorrow": ToolSpec(
        name="weather_tomorrow",
        description="Tomorrow's weather forecast where the user is.",
        parameters=_NO_ARGUMENTS,
        response=_REPORT,
    ),
}
"""Cue word → the one tool that answers a request naming it."""
CUE_TOOLS = {cue: tool.name for cue, tool in TOOLS.items()}

_TEMPLATES = (
    "What's the weather like, {cue}?",
    "Will it rain, {cue}?",
    "Do I need a coat, {cue}?",
    "How warm is it going to be, {cue}?",
    "Can you check the weather, {cue}?",
    "Should I plan a picnic, {cue}?",
)
CUE_PHRASES = {
    "today": ("today", "right now, today", "today, right now", "at the moment, today"),
    "tomorrow": (
        "tomorrow",
        "the next day, tomorrow",
        "tomorrow, the next day",
        "in a day, tomorrow",
    ),
}
"""A request ends with one of its cue's phrases; no other text holds a cue word."""
_OPENERS = ("", "Hi! ", "Hello. ", "Quick question: ", "Hey there! ")


def lab_task(
    index: int,
    seed: int,
    *,
    demonstration: bool = False,
    cues: Sequence[str] = ("today", "tomorrow"),
) -> TaskRecord:
    """Lab task ``index``: a pure function of its arguments.

    The cue cycles through ``cues`` with the index, so any ``len(cues)`` consecutive
    tasks are balanced. A demonstration's gold tool is the cued one when
    ``index // len(cues)`` is even, the other one otherwise: over every
    ``2·len(cues)`` consecutive indices each (cue, tool) pair occurs equally often, so
    the tool is independent of the cue.
    """
    unknown = [c for c in cues if c not in TOOLS]
    if not cues or unknown or len(set(cues)) != len(cues):
        raise ValueError(f"cues must be distinct names of {sorted(TOOLS)}; got {list(cues)}")
    kind = "demo" if demonstration else "task"
    rng = random.Random(f"{seed}:{kind}:{index}")
    cue = cues[index % len(cues)]
    (other,) = set(TOOLS) - {cue}
    gold = other if demonstration and (index // len(cues)) % 2 else cue
    text = rng.choice(_OPENERS) + rng.choice(_TEMPLATES).format(cue=rng.choice(CUE_PHRASES[cue]))
    offered = [TOOLS[c] for c in sorted(TOOLS)]
    rng.shuffle(offered)
    return TaskRecord(
        id=f"lab-{kind}-{seed}-{index:06d}",
        source=SOURCE,
        domain="weather",
        split="train",
        messages=[
            Message(role="system", content=SYSTEM_PROMPT),
            Message(role="user", content=text),
        ],
        tools=offered,
        gold=[[Call(name=TOOLS[gold].name, arguments={})]],
        facts=dict(FACT),
        world={"temperature": rng.randint(-5, 35)},
    )


def lab_tasks(
    n: int,
    seed: int,
    *,
    demonstrations: bool = False,
    cues: Sequence[str] = ("today", "tomorrow"),
) -> list[TaskRecord]:
    """Tasks ``0..n-1`` (see :func:`lab_task`)."""
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    return [lab_task(i, seed, demonstration=demonstrations, cues=cues) for i in range(n)]


def cue_of(task: TaskRecord) -> str:
    """The cue word of a lab task's request."""
    text = task.user_text()
    found = [cue for cue in CUE_PHRASES if cue in text]
    if len(found) != 1:
        raise ValueError(f"task {task.id}: expected one cue word of {sorted(CUE_PHRASES)}")
    return found[0]


def cued_tool(task: TaskRecord) -> str:
    """The tool the request's cue decides is right."""
    return CUE_TOOLS[cue_of(task)]


def write_dataset(records: Sequence[TaskRecord], out_dir: str | Path) -> dict[str, Any]:
    """Store ``records`` (all of the train split) as a dataset directory that
    ``io.load_train_set`` reads; written beside ``out_dir`` and renamed into place.
    Returns the manifest."""
    bad = [r.id for r in records if r.split != "train"]
    if bad:
        raise ValueError(f"write_dataset: records outside the train split, e.g. {bad[:3]}")
    records = sorted(records, key=lambda r: r.id)
    manifest: dict[str, Any] = {
        "sources": sorted({r.source for r in records}),
        "totals": {"train": len(records)},
        "content_sha256": {"train": io.content_hash(records)},
        "files": {},
    }
    with io.atomic_dir(out_dir) as tmp:
        path = tmp / "train.parquet"
        io.write_parquet(io.records_table(records), path)
        manifest["files"][path.name] = io.file_sha256(path)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest
