"""The gold-free execution mode."""

from __future__ import annotations

import pytest

from slca.config.rewards import RewardConfig
from slca.rewards.execution import execution_parts
from slca.rewards.score import score

W = "get_weather"
ERR = {"error": {"code": "invalid_arguments", "message": "city: required"}}
EXECUTION = RewardConfig(mode="execution")


def test_success_share_and_duplicates(b):
    task = b.task([[b.call(W, city="Paris")]])
    turns = [b.tc(W, city="Paris"), b.tc(W, city="Paris"), b.tc(W, city="Atlantis"), "ok"]
    r = score(b.rollout(turns, [{"t": 1}, {"t": 1}, ERR]), task, EXECUTION)
    assert (r.format, r.success, r.unique) == (1, pytest.approx(2 / 3), pytest.approx(2 / 3))
    assert r.mode == "execution" and r.redundancy_penalty == 0
    assert r.tool == pytest.approx(0.2 + 0.6 * 2 / 3 + 0.2 * 2 / 3)
    assert r.per_call == (1.0, 0.0, 0.0)  # success; repeat; error


def test_it_ignores_gold_arguments(b):
    task = b.task([[b.call(W, city="Paris")]])
    r = score(b.rollout([b.tc(W, city="London"), "ok"], [{"t": 3}]), task, EXECUTION)
    assert r.tool == 1.0 and r.value == 0  # the process part is still reported


def test_an_error_object_is_only_the_exact_error_shape(b):
    task = b.task([[b.call(W, city="Paris")]])
    look_alike = {"error": "none", "temperature": 20}
    r = score(b.rollout([b.tc(W, city="Paris"), "ok"], [look_alike]), task, EXECUTION)
    assert r.success == 1


def test_without_calls(b):
    assert execution_parts([], 1.0, needs_call=False).success == 1
    assert execution_parts([], 0.0, needs_call=True).success == 0
    task = b.task([])
    r = score(b.rollout([b.tc(W, city="Paris"), "ok"]), task, EXECUTION)
    assert r.no_call_task_calls == 1 and r.redundancy_penalty == pytest.approx(0.1)
    assert r.tool == pytest.approx(0.9)
