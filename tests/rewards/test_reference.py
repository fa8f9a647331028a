"""The authors' HierR (``mode: reference``): each rule where it differs from slca's.

The whole fixture set is replayed in tests/test_reference.py; these are the differences
the issue measured, as known answers, plus the rollout → text → RewardBreakdown path.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slca.config.rewards import RewardConfig
from slca.rewards.preference import SummaryInput, SummaryScorer
from slca.rewards.reference import loose_equal, reference_text, route_penalty, score_text
from slca.rewards.score import score, score_batch

W = "get_weather"
REFERENCE = RewardConfig(mode="reference")
RESPONSE = '<tool_response>\n{"ok": true}\n</tool_response>'


def gold(*steps):
    return [[{"name": n, "arguments": a} for n, a in step] for step in steps]


def block(obj) -> str:
    return f"<tool_call>{json.dumps(obj)}</tool_call>"


PARIS = gold([(W, {"city": "Paris"})])


def test_a_duplicate_call_is_not_penalised(b):
    text = "\n".join([block({"name": W, "arguments": {"city": "Paris"}})] * 2 + [RESPONSE])
    assert score_text(text, [W], PARIS).score == pytest.approx(0.9167, abs=1e-4)
    task = b.task([[b.call(W, city="Paris")]])
    turns = [b.tc(W, city="Paris"), b.tc(W, city="Paris"), "It is 21 in Paris."]
    assert score(b.rollout(turns), task).tool == pytest.approx(0.7167, abs=1e-4)
    assert score(b.rollout(turns), task, REFERENCE).tool == pytest.approx(0.9167, abs=1e-4)


def test_an_unknown_tool_makes_the_block_invalid():
    text = block({"name": "get_wether", "arguments": {"city": "Paris"}})
    result = score_text(text, [W], PARIS)
    assert result.format == 0.0 and result.scan.calls == []
    assert result.label_fields()["reward/tool_call/format_error_type"] == "tool_not_found"


def test_the_guard_fires_only_without_any_call_tag(b):
    # No parseable call but an open tag: the reference scores it (every part 0, no
    # guard); slca's guard fires on "no parseable call" and sets R_summary to -0.5.
    broken = score_text("<tool_call>{not json</tool_call>", [W], PARIS)
    assert not broken.no_call and broken.score == 0.0
    task = b.task([[b.call(W, city="Paris")]])
    rollout = b.rollout(["<tool_call>{not json</tool_call>", "It is 21 degrees."])
    assert score(rollout, task).guard_applied and score(rollout, task).summary == -0.5
    assert not score(rollout, task, REFERENCE).guard_applied
    # A call written only inside think is deleted first: the guard fires.
    hidden = score_text(f"<think>{block({'name': W, 'arguments': {}})}</think>ok", [W], PARIS)
    assert hidden.no_call and hidden.score == -0.5 and hidden.process == 0.0
    # A lone closing tag is not an opening tag: the guard fires too.
    assert score_text("</tool_call>", [W], PARIS).no_call


def test_no_call_tasks_abstention_and_a_stray_call():
    assert score_text("The sky is blue.", [W], []).score == pytest.approx(0.9)
    stray = score_text(block({"name": W, "arguments": {"city": "Paris"}}), [W], [])
    assert stray.score == pytest.approx(0.45)
    assert (stray.key, stray.value) == (1.0, 1.0)


def test_key_and_value_are_averaged_per_gold_call_with_arguments():
    # Two gold calls with arguments, one without: only the first two are averaged.
    g = gold([(W, {"city": "Paris", "unit": "c"}), (W, {"city": "Rome"}), ("get_time", {})])
    text = block([{"name": W, "arguments": {"city": "Paris"}}, {"name": "get_time"}])
    result = score_text(text, [W, "get_time"], g)
    # Paris call: key 1/2, value 1/2; Rome: unmatched, 0 and 0.
    assert (result.key, result.value) == (pytest.approx(0.25), pytest.approx(0.25))


@pytest.mark.parametrize(
    "a, b, equal",
    [
        (True, 1, True),  # float(True) == 1.0
        ("1e1", 10, True),
        (" Paris ", "paris", True),
        (["a"], "['A']", True),  # str() of a list is its repr
        ([1, 2], [1, 2], True),
        ([1, 2], [2, 1], False),  # order counts
        ([1], [1.0], False),  # exact JSON
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, True),
        ("true", "1", True),
        ("false", 0, True),
        (None, None, True),
        (None, "None", False),
        (10**400, 1.0, False),  # too big for float(): not equal, no crash
    ],
)
def test_loose_equality_known_answers(a, b, equal):
    assert loose_equal(a, b) is equal
    assert loose_equal(b, a) is equal


def test_arguments_formats():
    ok = score_text(block({"name": W, "parameters": {"city": "Paris"}}), [W], PARIS)
    assert ok.format == 1.0 and ok.value == 1.0
    as_string = {"name": W, "arguments": json.dumps({"city": "Paris"})}
    assert score_text(block(as_string), [W], PARIS).format == 0.0
    for falsy in (None, [], "", 0):
        assert score_text(block({"name": W, "arguments": falsy}), [W], PARIS).format == 1.0


def test_parallel_counts_the_first_block():
    g = gold([(W, {"city": "Paris"}), (W, {"city": "Rome"})])
    two_blocks = block({"name": W, "arguments": {"city": "Paris"}}) + block(
        {"name": W, "arguments": {"city": "Rome"}}
    )
    one_block = block([{"name": W, "arguments": {"city": c}} for c in ("Paris", "Rome")])
    assert score_text(two_blocks, [W], g).parallel == 0.0
    assert score_text(one_block, [W], g).parallel == 1.0


PIECES = st.sampled_from(
    ["<tool_call>", "</tool_call>", "<think>", "</thinking>", "{", "}", "[", "]", ":", ",",
     '"name"', '"arguments"', '"get_weather"', '{"city": "Paris"}', "x", "\n", RESPONSE]
)  # fmt: skip


@given(st.lists(PIECES, max_size=30).map("".join))
def test_any_text_scores_without_raising_and_stays_in_range(text):
    result = score_text(text, [W], PARIS)
    if result.no_call:
        assert result.score == -0.5
    else:
        assert 0.0 <= result.process <= 1.0 and result.score == result.process
    fields = result.fields()
    assert all(isinstance(v, int | float) for v in fields.values())


def test_route_penalty_is_the_estimators_guard():
    assert route_penalty(0.8, 0.5, 1.3, False) == (0.8, 0.5, False)
    assert route_penalty(0.8, 0.5, -0.5, True) == (0.0, -0.5, True)
    assert route_penalty(0.1, -0.4, -0.3, False) == (0.0, -0.3, True)


# ---------------------------------------------------------------- rollouts


def test_reference_text_puts_the_responses_after_their_turn(b):
    rollout = b.rollout(
        [b.tc(W, city="Paris") + "<tool_call>{bad</tool_call>", "It is 21 in Paris."],
        [{"temperature": 21}],
    )
    text = reference_text(rollout)
    first, answer = rollout.turns[0].text, rollout.turns[1].text
    assert text.startswith(first + '\n<tool_response>\n{"temperature": 21}\n</tool_response>')
    assert '"code": "invalid_call"' in text and text.endswith("\n" + answer)
    # The last turn's calls were never answered (the rollout ended there).
    cut = b.rollout([b.tc(W, city="Paris")])
    assert reference_text(cut) == cut.turns[0].text


class Counting(SummaryScorer):
    def __init__(self):
        self.asked = []

    def score_batch(self, items: list[SummaryInput]) -> list[float]:
        self.asked += [i.summary for i in items]
        return [0.5] * len(items)


def test_score_in_reference_mode(b):
    task = b.task([[b.call(W, city="Paris")]])
    scorer = Counting()
    good = b.rollout([b.tc(W, city="Paris"), "It is 21 degrees in Paris."])
    short = b.rollout([b.tc(W, city="Paris"), "21."])
    no_response = b.rollout(["It is 21 degrees in Paris, trust me."])  # guard
    direct = b.rollout([b.tc(W, city="Paris")])  # cut off: no response, no answer
    out = score_batch(
        [good, short, no_response, direct], [task] * 4, REFERENCE, summary_scorer=scorer
    )
    assert scorer.asked == ["It is 21 degrees in Paris."]  # the others score 0 unasked
    assert (out[0].tool, out[0].summary, out[0].mode) == (1.0, 0.5, "reference")
    assert (out[1].tool, out[1].summary) == (1.0, 0.0)
    assert out[2].guard_applied and (out[2].tool, out[2].summary) == (0.0, -0.5)
    assert not out[3].guard_applied and out[3].summary == 0.0 and out[3].redundancy_penalty == 0
    assert out[0].as_dict()["per_call"] == (0.0,)


def test_reference_mode_routes_a_negative_total_to_the_summary(b):
    class Negative(SummaryScorer):
        def score_batch(self, items):
            return [-2.0] * len(items)

    task = b.task([[b.call(W, city="Paris")]])
    rollout = b.rollout([b.tc(W, city="Paris"), "It is 21 degrees in Paris."])
    (r,) = score_batch([rollout], [task], REFERENCE, summary_scorer=Negative())
    assert r.guard_applied and (r.tool, r.summary) == (0.0, -1.0)
    off = RewardConfig(mode="reference", guard={"on_negative_total": False})
    (r,) = score_batch([rollout], [task], off, summary_scorer=Negative())
    assert not r.guard_applied and (r.tool, r.summary) == (1.0, -2.0)
