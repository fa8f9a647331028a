"""The credit lab's tasks: a tool choice the request cues, and a free summary style.

A lab task asks about the weather on the day a cue word in the request names
(``today`` or ``tomorrow``). Of its two tools exactly one serves that day, so tool
correctness is one discrete choice that the request decides and a policy can learn.
Neither tool takes arguments: the tiny policy cannot copy values, and an argument it
cannot learn would blur ``R_tool``. Every task states a fact (the temperature), so the
SFT stage's reference summary ("Here is what I found: ...") and its poor summary differ
(:func:`slca.training.sft.summary_for`): the summary style is a second choice, made by
the summary's own tokens.

- :func:`lab_tasks` gives RL tasks: the gold call is the cued tool.
- ``lab_tasks(..., demonstrations=True)`` gives SFT demonstrations whose gold call is
  the cued tool for exactly half of each cue's tasks, counterbalanced: a policy
  trained on them chooses each tool about half the time whatever the cue, so RL
  starts at chance on the tool choice. (The SFT stage picks the summary style from
  its own seeded draw, independent of the calls, at ``sft.poor_summary_frac``.)

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

CUE_TOOLS = {"today": "weather_today", "tomorrow": "weather_tomorrow"}
"""Cue word in the request → the one tool that answers it."""

_CONDITIONS = ["sunny", "cloudy", "rain", "snow", "windy"]
_REPORT = {
    "type": "object",
    "properties": {
        "temperature": {"type": "integer"},
        "condition": {"type": "string", "enum": _CONDITIONS},
    },
    "required": ["temperature", "condition"],
    "additionalProperties": False,
}
_NO_ARGUMENTS = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
TOOLS = {
    "weather_today": ToolSpec(
        name="weather_today",
        description="Today's weather where the user is.",
        parameters=_NO_ARGUMENTS,
        response=_REPORT,
    ),
    "weather_tomorrow": ToolSpec(
        name="weather_tomorrow",
        description="Tomorrow's weather forecast where the user is.",
        parameters=_NO_ARGUMENTS,
        response=_REPORT,
    ),
}
# Each holds the cue once; no template holds either cue word otherwise.
_TEMPLATES = (
    "What's the weather like {cue}?",
    "Will it rain {cue}?",
    "Do I need a coat {cue}?",
    "How warm is it going to be {cue}?",
    "Tell me the weather for {cue}.",
    "Should I plan a picnic {cue}?",
)
_OPENERS = ("", "Hi! ", "Hello. ", "Quick question: ", "Hey there! ")
_CLOSERS = ("", " Thanks!", " Thank you.", " Please be brief.")


def lab_task(index: int, seed: int, *, demonstration: bool = False) -> TaskRecord:
    """Lab task ``index``: a pure function of its arguments.

    The cue alternates with the index (``today`` on even indices), so any run of
    consecutive tasks is balanced. A demonstration's gold tool is the cued one when
    ``index // 2`` is even, the other one otherwise: over every four consecutive
    indices each (cue, tool) pair occurs once, so the tool is independent of the cue.
    """
    kind = "demo" if demonstration else "task"
    rng = random.Random(f"{seed}:{kind}:{index}")
    cues = sorted(CUE_TOOLS)
    cue = cues[index % 2]
    tool = CUE_TOOLS[cue]
    if demonstration and (index // 2) % 2:
        tool = CUE_TOOLS[cues[1 - index % 2]]
    world = {"temperature": rng.randint(-5, 35), "condition": rng.choice(_CONDITIONS)}
    text = rng.choice(_OPENERS) + rng.choice(_TEMPLATES).format(cue=cue) + rng.choice(_CLOSERS)
    tools = [TOOLS[name] for name in sorted(TOOLS)]
    rng.shuffle(tools)
    return TaskRecord(
        id=f"lab-{kind}-{seed}-{index:06d}",
        source=SOURCE,
        domain="weather",
        split="train",
        messages=[
            Message(role="system", content=SYSTEM_PROMPT),
            Message(role="user", content=text),
        ],
        tools=tools,
        gold=[[Call(name=tool, arguments={})]],
        facts={"temperature": world["temperature"]},
        world=world,
    )


def lab_tasks(n: int, seed: int, *, demonstrations: bool = False) -> list[TaskRecord]:
    """Tasks ``0..n-1`` (see :func:`lab_task`)."""
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    return [lab_task(i, seed, demonstration=demonstrations) for i in range(n)]


def cue_of(task: TaskRecord) -> str:
    """The cue word of a lab task's request."""
    text = task.user_text()
    found = [cue for cue in CUE_TOOLS if cue in text]
    if len(found) != 1:
        raise ValueError(f"task {task.id}: expected one cue word of {sorted(CUE_TOOLS)}")
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
