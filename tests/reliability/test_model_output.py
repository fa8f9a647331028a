"""Issue 16, faults 5, 9 and 10: hostile model output and hostile schemas.

Model output is data: a lone surrogate in an argument is an error value, parsing is
linear in the length of the turn (a property over growing N, measured as a ratio of
best-of-k times, never as a wall-clock threshold), and a response schema that asks
for a billion items fails fast as a counted ``simulator_failure``.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slca.grammar import json_depth, lex_turn, parse_turn
from slca.segments import label_turn
from slca.simulator import Simulator, is_error

ECHO = {
    "name": "echo",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    "response": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}


# --- fault 5: a lone surrogate ---------------------------------------------------------


def test_a_lone_surrogate_in_an_argument_is_an_error_value_not_a_crash():
    turn = parse_turn('<tool_call>{"name": "echo", "arguments": {"q": "\\ud800"}}</tool_call>')
    (block,) = turn.blocks
    assert block.error is not None and block.error.code == "invalid_unicode"
    assert "q" in block.error.message
    assert turn.calls == ()


def test_the_simulator_answers_a_lone_surrogate_with_an_error():
    simulator = Simulator()
    response = simulator.call(ECHO, {"q": "\ud800"})
    assert is_error(response) and response["error"]["code"] == "invalid_arguments"
    assert simulator.stats.invalid_arguments == 1
    # a surrogate in a key, nested, is caught too
    response = simulator.call(ECHO, {"q": "x", "deep": [{"\udfff": 1}]})
    assert is_error(response) and response["error"]["code"] == "invalid_arguments"


@pytest.fixture(scope="module")
def tokenizer():
    from slca.training.tiny import train_tokenizer

    return train_tokenizer([json.dumps(ECHO), "echo done", '<tool_call>"\\ud800"'], 400)


def _echo_task():
    from slca.data.record import TaskRecord

    return TaskRecord(
        id="t1",
        source="synth",
        domain="x",
        split="train",
        messages=[{"role": "user", "content": "echo"}],
        tools=[ECHO],
        gold=[],
    )


def test_a_rollout_whose_call_carries_a_lone_surrogate_finishes(tokenizer):
    from helpers import ScriptedEngine

    from slca.generation.engines import SamplingParams
    from slca.rollout.loop import run_rollouts

    bad = '<tool_call>{"name": "echo", "arguments": {"q": "\\ud800"}}</tool_call>'
    (rollout,) = run_rollouts(
        [_echo_task()],
        engine=ScriptedEngine(tokenizer, [bad, "done"]),
        tokenizer=tokenizer,
        simulator=Simulator(),
        group_size=1,
        sampling=SamplingParams(max_new_tokens=200),
    )
    assert rollout.finish_reason == "stop"
    assert rollout.turns[0].parsed.blocks[0].error.code == "invalid_unicode"


# --- fault 9: quadratic parsing --------------------------------------------------------

#: The shapes that made the old lexer quadratic, and neighbours of them.
ADVERSARIAL_UNITS = ['\\"', '"\\', '"</tool_call>', "\\", '"', "[", "{", "<tool_call>", "a\n"]


def _best_of(k: int, work) -> float:
    """The least CPU time (this thread's, so other processes on a busy machine do not
    count) that ``work`` took in ``k`` runs."""
    best = float("inf")
    for _ in range(k):
        started = time.thread_time()
        work()
        best = min(best, time.thread_time() - started)
    return best


def _growth(make, function, n: int, factor: int = 8) -> float:
    """cpu(function(make(factor·n))) / cpu(function(make(n))), best of 5 each."""
    small, large = make(n), make(factor * n)
    function(small)  # warm caches (regex compilation)
    return _best_of(5, lambda: function(large)) / max(_best_of(5, lambda: function(small)), 1e-6)


# Linear work grows 8x for 8x the input, quadratic 64x: 24 separates them with room for
# noise (a ratio of two best-of-5 CPU times, not a wall-clock limit).
LINEAR_BOUND = 24


def test_an_unclosed_string_of_escaped_quotes_lexes_in_linear_time():
    def make(n):
        return '<tool_call>"' + '\\"' * n

    assert _growth(make, lex_turn, 20_000) < LINEAR_BOUND
    assert _growth(make, lambda text: label_turn(text, final=True), 20_000) < LINEAR_BOUND


def test_a_closed_block_of_escaped_quotes_parses_in_linear_time():
    def make(n):
        return '<tool_call>"' + '\\"' * n + "</tool_call>"

    assert _growth(make, parse_turn, 4_000) < LINEAR_BOUND
    assert _growth(lambda n: '"' + '\\"' * n, json_depth, 4_000) < LINEAR_BOUND


@settings(max_examples=25)
@given(
    unit=st.lists(st.sampled_from(ADVERSARIAL_UNITS), min_size=1, max_size=4).map("".join),
    prefix=st.sampled_from(["", "<tool_call>", '<tool_call>{"name": "a", "arguments": "']),
)
def test_parsing_time_grows_linearly_with_the_length_of_the_turn(unit, prefix):
    def make(n):
        return prefix + unit * (n // len(unit))

    assert _growth(make, parse_turn, 16_000) < LINEAR_BOUND


@given(st.text(alphabet='"\\\n<>/[]{}tool_cal ', max_size=60))
def test_the_linear_lexer_finds_the_blocks_the_regex_definition_finds(text):
    """Same regions as the definition: the first closing tag outside a one-line JSON
    string (skipping at most 8 inside strings), else the first one at all."""
    import re

    string = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
    close_outside = re.compile(string + "|" + re.escape("</tool_call>"))

    def reference_close(start):
        skipped = 0
        for m in close_outside.finditer(text, start):
            if m.group() == "</tool_call>":
                return m.start()
            skipped += m.group().count("</tool_call>")
            if skipped >= 8:
                break
        return text.find("</tool_call>", start)

    for region in lex_turn(text):
        if region.kind == "tool_call":
            close = reference_close(region.start + len("<tool_call>"))
            expected = len(text) if close < 0 else close + len("</tool_call>")
            assert region.end == expected
    stripped = re.sub(string, '""', text)
    depth = deepest = 0
    for ch in stripped:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
    assert json_depth(text) == deepest


def test_a_turn_over_max_turn_bytes_ends_the_rollout_unparsed(monkeypatch, tokenizer):
    """The byte limit is checked before the turn is labelled or parsed."""
    from helpers import ScriptedEngine

    import slca.rollout.loop as loop
    from slca.generation.engines import SamplingParams

    seen = []
    real = loop.parse_turn
    monkeypatch.setattr(loop, "parse_turn", lambda text: seen.append(text) or real(text))
    huge = '<tool_call>{"name": "echo", "arguments": {"q": "' + "x" * 300 + '"}}</tool_call>'
    (rollout,) = loop.run_rollouts(
        [_echo_task()],
        engine=ScriptedEngine(tokenizer, [huge]),
        tokenizer=tokenizer,
        simulator=Simulator(),
        group_size=1,
        sampling=SamplingParams(max_new_tokens=1000),
        limits=loop.RolloutLimits(max_turn_bytes=100),
    )
    assert rollout.finish_reason == "max_bytes"
    assert seen == [] and rollout.calls == []
    (turn,) = rollout.turns
    assert turn.parsed.blocks == () and len(rollout.kind_codes) == len(rollout.token_ids)


# --- fault 10: hostile response schemas ------------------------------------------------


def _answer_within(seconds: float, call):
    """``call()``'s result; a hang (the fault) fails the test instead of the suite."""
    box = []
    worker = threading.Thread(target=lambda: box.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"no answer within {seconds} s: generation is unbounded"
    return box[0]


def _tool(response):
    return {"name": "hostile", "parameters": {"type": "object"}, "response": response}


def test_a_billion_min_items_or_min_length_is_a_counted_simulator_failure():
    simulator = Simulator()
    for schema in (
        {"type": "array", "minItems": 10**9},
        {"type": "string", "minLength": 10**9},
        {"type": "object", "minProperties": 10**9},
        {"type": "string", "pattern": "a{70000}"},
        {"type": "string", "pattern": "(a{200}){400}"},
        # small at every level, 10^9 values in all
        {"type": "array", "minItems": 10, "items": _nest(8)},
    ):
        response = _answer_within(60, lambda s=schema: simulator.call(_tool(s), {}))
        assert is_error(response) and response["error"]["code"] == "simulator_failure", schema
        assert "limit" in response["error"]["message"], response
    assert simulator.stats.failures == 6


def _nest(levels):
    schema = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "minItems": 10, "items": schema}
    return schema


def test_responses_within_the_limits_are_still_generated():
    simulator = Simulator()
    schema = {"type": "array", "minItems": 50, "items": {"type": "string", "minLength": 20}}
    response = simulator.call(_tool(schema), {})
    assert isinstance(response, list) and len(response) >= 50
    # a fixed repeat above rstr's cap of 100 is generated, not refused
    response = simulator.call(_tool({"type": "string", "pattern": "^[0-9]{128}$"}), {})
    assert isinstance(response, str) and len(response) == 128 and response.isdigit()
    assert len(json.dumps(response)) < simulator.limits.max_response_chars
