"""The entry point: composition, batches, bad input, and properties over arbitrary text."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slca.config.rewards import RewardConfig
from slca.rewards.score import RewardBreakdown, batch_metrics, score, score_batch
from slca.rollout.types import ExecutedCall

W = "get_weather"
PARTS = ("tool", "format", "name", "key", "value", "parallel", "success", "unique")


def _task(b):
    return b.task(
        [[b.call(W, city="Paris")], [b.call("find_city", label="var1", landmark="$x$")]],
        facts={"Paris.temperature": 21},
    )


DEFAULT = RewardConfig()


def _check(r: RewardBreakdown, config: RewardConfig = DEFAULT) -> None:
    for part in PARTS:
        value = getattr(r, part)
        assert 0.0 <= value <= 1.0 and math.isfinite(value), (part, value)
    assert all(0.0 <= v <= 1.0 for v in r.per_call)
    assert r.summary == config.guard.penalty if r.guard_applied else 0.0 <= r.summary <= 1.0
    assert math.isfinite(r.tool_raw)


def test_breakdown_is_frozen_and_serialisable(b):
    r = score(b.rollout([b.tc(W, city="Paris"), "It is 21 in Paris."]), _task(b))
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.tool = 0.0  # type: ignore[misc]
    d = r.as_dict()
    assert d["redundant_calls"] == 0 and d["per_call"] == (1.0,)


def test_score_batch_by_id_or_in_order(b):
    t1, t2 = b.task([[b.call(W, city="Paris")]], task_id="a"), b.task([], task_id="b")
    r1 = b.rollout([b.tc(W, city="Paris"), "It is warm in Paris."], task_id="a")
    r2 = b.rollout(["Humidity is water vapour in the air."], task_id="b")
    by_id = score_batch([r1, r2], {"a": t1, "b": t2})
    in_order = score_batch([r1, r2], [t1, t2])
    assert by_id == in_order and [r.tool for r in by_id] == [1.0, 1.0]
    metrics = batch_metrics(by_id)
    assert metrics["reward/tool"] == 1.0 and metrics["rollout/tool_calls_per_task"] == 0.5
    assert metrics["rollout/redundant_calls"] == 0 and batch_metrics([]) == {}
    with pytest.raises(KeyError, match="'c'"):
        score_batch([b.rollout([], task_id="c")], {"a": t1})
    with pytest.raises(ValueError, match="2 rollouts but 1 tasks"):
        score_batch([r1, r2], [t1])


def test_config_loads_from_params_yaml(tmp_path):
    from slca.config import ConfigError, load_section

    path = tmp_path / "params.yaml"
    path.write_text("train:\n  rewards:\n    mode: execution\n    guard: {penalty: -1}\n")
    config = load_section(path, "train.rewards", RewardConfig)
    assert config.mode == "execution" and config.guard.penalty == -1
    path.write_text("train:\n  rewards:\n    process: {format: 2}\n")
    with pytest.raises(ConfigError, match="train.rewards.process"):
        load_section(path, "train.rewards", RewardConfig)


# ---------------------------------------------------------------- bad input
def _deep(n: int) -> str:
    return "[" * n + "]" * n


BAD_TURNS = {
    "empty": [""],
    "empty turns then answer": ["", "", "ok"],
    "megabytes of text": ["x" * 2_000_000],
    "megabytes inside a call": [
        b'<tool_call>{"name": "get_weather", "arguments": {"city": "'.decode()
        + "P" * 2_000_000
        + '"}}</tool_call>',
        "ok",
    ],
    "megabytes of blocks": [
        '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>' * 20_000
    ],
    "unbalanced": ["<tool_call><tool_call>{}</tool_call></tool_call></think><think>"],
    "nested tags": [
        '<tool_call>{"name": "a", "arguments": {"x": "<tool_call>{}</tool_call>"}}</tool_call>',
        "ok",
    ],
    "json 10k deep": ["<tool_call>" + _deep(10_000) + "</tool_call>", "ok"],
    "arguments 10k deep": [
        '<tool_call>{"name": "get_weather", "arguments": {"c": ' + _deep(10_000) + "}}</tool_call>"
    ],
    "surrogates": [
        "\udcff\udcfe <tool_call>\ud800</tool_call>",
        "It is \udcff 21 \ufffd in Paris.",
    ],
    "replacement chars": ["\ufffd" * 1000],
    "unknown tools": [
        b"<tool_call>".decode() + '{"name": "rm -rf", "arguments": {"x": 1}}</tool_call>',
        "done",
    ],
    "only a summary with a huge number": ["It is 1" + "0" * 5000 + " degrees."],
}


@pytest.mark.parametrize("name", list(BAD_TURNS))
@pytest.mark.parametrize("mode", ["process", "execution", "reference"])
def test_bad_input_is_scored_never_raised(b, name, mode):
    config = RewardConfig(mode=mode)
    r = score(b.rollout(BAD_TURNS[name]), _task(b), config)
    _check(r, config)
    if name in ("json 10k deep", "arguments 10k deep", "unbalanced", "surrogates"):
        assert r.n_valid_blocks < r.n_blocks and r.format < 1


def test_bad_executed_calls_are_scored(b):
    """Records built by hand (not through the parser): deep or odd values everywhere."""
    deep: list = []
    cursor = deep
    for _ in range(10_000):
        cursor.append([])
        cursor = cursor[0]
    rollout = b.rollout([b.tc(W, city="Paris"), "It is 21 in Paris."])
    rollout.calls = [
        ExecutedCall(0, 0, 0, W, {"city": deep}, deep),
        ExecutedCall(1, 0, 0, W, {"city": deep}, {"error": {"code": "x", "message": deep}}),
        ExecutedCall(2, 7, 3, "ghost", {}, "\udcff" * 10),
    ]
    for mode in ("process", "execution", "reference"):
        config = RewardConfig(mode=mode)
        r = score(rollout, _task(b), config)
        _check(r, config)
        assert len(r.per_call) == 3


# ---------------------------------------------------------------- properties
FRAGMENTS = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<think>",
        "</think>",
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        '{"name": "find_city", "arguments": {"landmark": "$x$"}}',
        '[{"name": "get_weather", "arguments": {}}]',
        '{"name": "get_weather", "arguments": "{\\"city\\": 1}"}',
        "[",
        "{",
        '"',
        "21",
        "Paris",
        " ",
        "\n",
        "\udcff",
        "\ufffd",
    ]
)
TURN = st.one_of(st.lists(FRAGMENTS, max_size=12).map("".join), st.text(max_size=60))
RESPONSE = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=10),
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
    st.just({"error": {"code": "x", "message": "y"}}),
)


@given(
    turns=st.lists(TURN, max_size=4),
    responses=st.lists(RESPONSE, max_size=6),
    mode=st.sampled_from(["process", "execution", "reference"]),
    no_call=st.booleans(),
)
def test_score_never_raises_and_parts_stay_in_range(b, turns, responses, mode, no_call):
    task = b.task([]) if no_call else _task(b)
    config = RewardConfig(mode=mode)
    r = score(b.rollout(turns, responses or None), task, config)
    _check(r, config)
    if r.guard_applied:
        assert r.tool == 0 and r.per_call == tuple(0.0 for _ in r.per_call)


def test_megabyte_summary_on_a_no_call_task_is_read_in_bounded_time(b):
    task = b.task([], prompt="What does humidity measure?")
    text = "Humidity is 42 percent of Foo. " * 70_000  # ~2 MB
    r = score(b.rollout([text]), task)
    _check(r)
    # nothing to cover (1), unsupported capped (-0.5), out of length bounds (-0.2)
    assert not r.guard_applied and r.summary == pytest.approx(0.3)
