"""The omission guard and no-call tasks (DESIGN §2)."""

from __future__ import annotations

import pytest

from slca.config.rewards import RewardConfig
from slca.rewards.score import score

W = "get_weather"
APPROX = pytest.approx


@pytest.mark.parametrize(
    "turns",
    [
        ["It is 21 degrees in Paris."],  # no call at all
        ['<tool_call>{"name": "get_weather", "arguments": {</tool_call>', "It is 21."],
        ["<tool_call>" + '{"name": "get_weather"'],  # unclosed, and no final answer
        [""],
        [],
    ],
)
def test_a_needed_call_that_never_parses_triggers_the_guard(b, turns):
    task = b.task([[b.call(W, city="Paris")]])
    r = score(b.rollout(turns), task)
    assert r.guard_applied and r.needs_call and not r.has_call
    assert (r.tool, r.summary, r.summary_raw) == (0.0, -0.5, None)


def test_the_penalty_is_configurable_and_the_guard_can_be_off(b):
    task = b.task([[b.call(W, city="Paris")]])
    rollout = b.rollout(["Paris is warm, about 21 degrees."])
    assert score(rollout, task, RewardConfig(guard={"penalty": -1.0})).summary == -1.0
    off = score(rollout, task, RewardConfig(guard={"enabled": False}))
    assert not off.guard_applied and off.summary > 0
    assert off.tool == APPROX(0.0)  # format 0, name 0, …: nothing earned


def test_no_call_task_without_a_call_scores_one(b):
    task = b.task([], prompt="What does humidity measure?")
    r = score(b.rollout(["Humidity measures the water vapour in the air."]), task)
    assert (r.format, r.name, r.key, r.value, r.parallel) == (1, 1, 1, 1, 1)
    assert r.tool == 1 and not r.needs_call and not r.has_call and not r.guard_applied
    assert r.redundant_calls == 0 and r.summary == 1


def test_one_call_on_a_no_call_task_costs_all_but_format_and_a_penalty(b):
    task = b.task([], prompt="What does humidity measure?")
    r = score(b.rollout([b.tc(W, city="Paris"), "Humidity measures water vapour."]), task)
    assert (r.format, r.name, r.key, r.value, r.parallel) == (1, 0, 0, 0, 0)
    assert r.no_call_task_calls == 1 and r.extra_steps == 0
    assert r.tool_raw == APPROX(0.1 - 0.1) and r.tool == 0
    assert not r.guard_applied and r.summary > 0
    assert r.per_call == (0.0,)


def test_a_negative_total_triggers_the_guard(b):
    task = b.task([], prompt="What does humidity measure?")
    turns = [b.tc(W, city="Paris") + b.tc(W, city="Rome"), "Humidity measures water vapour."]
    r = score(b.rollout(turns), task)
    assert r.tool_raw == APPROX(0.1 - 0.2) and r.guard_applied
    assert (r.tool, r.summary) == (0.0, -0.5)
    relaxed = score(b.rollout(turns), task, RewardConfig(guard={"on_negative_total": False}))
    assert not relaxed.guard_applied and relaxed.tool == 0 and relaxed.summary > 0


def test_the_guard_uses_the_parse_not_the_simulator(b):
    # A parseable call to an unknown tool is a call: no guard, but it earns little.
    task = b.task([[b.call(W, city="Paris")]])
    r = score(
        b.rollout(
            [b.tc("nonexistent", x=1), "ok then"],
            [{"error": {"code": "unknown_tool", "message": "no"}}],
        ),
        task,
    )
    assert r.has_call and not r.guard_applied
    assert r.unneeded_tool_calls == 1 and r.name == 0 and r.format == 1


def test_a_truncated_answer_gets_the_truncation_penalty_and_keeps_its_calls(b):
    task = b.task([[b.call(W, city="Paris")]], facts={"Paris.temperature": 21})
    rollout = b.rollout([b.tc(W, city="Paris"), "It is 21 degrees in Paris and"])
    rollout.finish_reason = "max_tokens"
    default = score(rollout, task)
    assert default.truncated and default.summary > 0  # off by default: scored as finished
    cut = score(rollout, task, RewardConfig(truncation={"penalty": 0.3}))
    assert cut.truncated and (cut.summary, cut.summary_raw) == (-0.3, None)
    assert cut.tool == default.tool == APPROX(1.0)
    rollout.finish_reason = "max_turns"  # every turn ended: not a truncation
    assert score(rollout, task, RewardConfig(truncation={"penalty": 0.3})).summary > 0


def test_the_guard_penalty_stands_on_a_truncated_rollout(b):
    task = b.task([[b.call(W, city="Paris")]])
    rollout = b.rollout(["Paris is warm, about"])
    rollout.finish_reason = "max_tokens"
    r = score(rollout, task, RewardConfig(truncation={"penalty": 0.3}))
    assert r.guard_applied and r.summary == -0.5


def test_a_truncation_charged_to_the_tool_head_lowers_r_tool_and_keeps_the_summary(b):
    task = b.task([[b.call(W, city="Paris")]], facts={"Paris.temperature": 21})
    rollout = b.rollout([b.tc(W, city="Paris"), "It is 21 degrees in Paris and"])
    rollout.finish_reason = "max_tokens"
    finished = score(rollout, task)
    on_tool = RewardConfig(truncation={"penalty": 0.3, "head": "tool"})
    cut = score(rollout, task, on_tool)
    assert cut.truncated and cut.tool == APPROX(finished.tool - 0.3)
    assert (cut.summary, cut.summary_raw) == (finished.summary, finished.summary_raw)
    # never below 0: a wrong call cut off scores 0, not less
    wrong = b.rollout([b.tc("get_time", city="Paris")])
    wrong.finish_reason = "max_tokens"
    assert score(wrong, task, RewardConfig(truncation={"penalty": 5.0, "head": "tool"})).tool == 0
    rollout.finish_reason = "stop"  # finished: nothing charged
    assert score(rollout, task, on_tool).tool == APPROX(finished.tool)


def test_a_truncation_charged_to_the_cut_turn_takes_that_turns_head(b):
    task = b.task([[b.call(W, city="Paris")]], facts={"Paris.temperature": 21})
    cut = RewardConfig(truncation={"penalty": 0.3, "head": "cut"})
    in_answer = b.rollout([b.tc(W, city="Paris"), "It is 21 degrees in Paris and"])
    in_answer.finish_reason = "max_tokens"
    finished = score(in_answer, task)
    r = score(in_answer, task, cut)  # cut in the answer: the summary head pays
    assert (r.summary, r.tool) == (-0.3, APPROX(finished.tool))
    in_call = b.rollout([b.tc(W, city="Paris") + " and then more and more"])
    in_call.finish_reason = "max_tokens"
    assert in_call.final_turn is None
    plain = score(in_call, task)
    r = score(in_call, task, cut)  # cut in a call turn: no answer tokens, the tool head pays
    assert r.tool == APPROX(plain.tool - 0.3) and r.summary == plain.summary
