"""Redundancy counts and their penalty."""

from __future__ import annotations

import pytest

from slca.config.rewards import RewardConfig
from slca.rewards.match import policy_calls
from slca.rewards.redundancy import count_redundancy
from slca.rewards.score import score

W = "get_weather"
APPROX = pytest.approx


def test_a_repeated_call_is_a_duplicate_and_an_extra_step(b):
    task = b.task([[b.call(W, city="Paris")]])
    r = score(b.rollout([b.tc(W, city="Paris"), b.tc(W, city="Paris"), "ok"]), task)
    assert (r.duplicate_calls, r.unneeded_tool_calls, r.extra_steps) == (1, 0, 1)
    assert r.name == APPROX(2 / 3) and r.parallel == 1
    assert r.redundancy_penalty == APPROX(0.2)
    assert r.tool == APPROX(0.1 + 0.25 * 2 / 3 + 0.15 + 0.2 + 0.3 - 0.2)
    assert r.per_call == (APPROX(1.0), 0.0)  # the repeat matched no gold call


def test_duplicates_compare_canonical_arguments(b):
    task = b.task([[b.call(W, city="Paris", unit="c")]])
    turn = '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}, '
    turn += '{"name": "get_weather", "arguments": {"unit": "c", "city": "Paris"}}]</tool_call>'
    assert score(b.rollout([turn, "ok"]), task).duplicate_calls == 1


def test_a_call_to_a_tool_no_gold_step_uses(b):
    task = b.task([[b.call(W, city="Paris")]])
    turn = b.tcs((W, {"city": "Paris"}), ("get_time", {"city": "Paris"}))
    r = score(b.rollout([turn, "ok"]), task)
    assert (r.duplicate_calls, r.unneeded_tool_calls, r.redundant_calls) == (0, 1, 1)
    assert r.parallel == 0  # two calls where the gold step has one
    assert r.tool == APPROX(0.1 + 0.25 * 2 / 3 + 0.15 + 0.2 - 0.1)


def test_each_call_counts_under_one_reason(b):
    task = b.task([])
    calls = policy_calls(b.rollout([b.tc("x"), b.tc("x"), "ok"]))
    red = count_redundancy(calls, task)
    assert (red.no_call_task, red.duplicate, red.unneeded_tool, red.extra_steps) == (2, 0, 0, 0)


def test_penalties_are_configurable(b):
    task = b.task([[b.call(W, city="Paris")]])
    rollout = b.rollout([b.tc(W, city="Paris"), b.tc(W, city="Paris"), "ok"])
    config = RewardConfig(redundancy={"per_call": 0.0, "per_extra_step": 0.0})
    r = score(rollout, task, config)
    assert r.redundancy_penalty == 0 and r.duplicate_calls == 1
    assert r.tool == APPROX(0.1 + 0.25 * 2 / 3 + 0.15 + 0.2 + 0.3)
