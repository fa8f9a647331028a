"""Shared builders for task-data tests."""

from __future__ import annotations

import copy
from typing import Any

import pytest

WEATHER_TOOL: dict[str, Any] = {
    "name": "get_weather",
    "description": "Current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["c", "f"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
    "response": {
        "type": "object",
        "properties": {"temperature": {"type": "number"}},
        "required": ["temperature"],
    },
}


def make_record(**over: Any) -> dict[str, Any]:
    """A valid record as plain data; keyword arguments replace fields."""
    rec: dict[str, Any] = {
        "id": "t-1",
        "source": "synth",
        "domain": "weather",
        "split": "train",
        "messages": [{"role": "user", "content": "How warm is it in Paris?"}],
        "tools": [copy.deepcopy(WEATHER_TOOL)],
        "gold": [[{"name": "get_weather", "arguments": {"city": "Paris"}}]],
        "facts": {"temperature": 21},
        "eval_only": False,
    }
    rec.update(over)
    return rec


@pytest.fixture
def record() -> dict[str, Any]:
    return make_record()


@pytest.fixture(name="make_record")
def make_record_fixture():
    return make_record


@pytest.fixture(name="weather_tool")
def weather_tool_fixture() -> dict[str, Any]:
    return copy.deepcopy(WEATHER_TOOL)
