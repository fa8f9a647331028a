"""HierR process reward: hand-written trajectories with known scores."""

from __future__ import annotations

import pytest

from slca.config.rewards import RewardConfig
from slca.data.record import Call
from slca.rewards.process import name_f1
from slca.rewards.score import score

W = "get_weather"
APPROX = pytest.approx


def _score(b, gold, turns, responses=None, **task_kw):
    task = b.task(gold, **task_kw)
    return score(b.rollout(turns, responses), task)


def _parts(r):
    return (r.format, r.name, r.key, r.value, r.parallel)


def test_a_correct_call_scores_one(b):
    r = _score(b, [[b.call(W, city="Paris")]], [b.tc(W, city="Paris"), "It is 21 in Paris."])
    assert _parts(r) == (1, 1, 1, 1, 1)
    assert r.tool == APPROX(1.0)
    assert r.needs_call and r.has_call and not r.guard_applied
    assert r.per_call == (APPROX(1.0),)


def test_a_wrong_value_loses_the_value_part_only(b):
    r = _score(b, [[b.call(W, city="Paris")]], [b.tc(W, city="London"), "Done."])
    assert _parts(r) == (1, 1, 1, 0, 1)
    assert r.tool == APPROX(0.10 + 0.25 + 0.15 + 0.30)
    assert r.per_call == (APPROX((0.25 + 0.15) / 0.60),)


@pytest.mark.parametrize("value", [" paris ", "PARIS", "Paris"])
def test_strings_are_trimmed_and_case_folded(b, value):
    r = _score(b, [[b.call(W, city="Paris")]], [b.tc(W, city=value), "ok"])
    assert r.value == 1


def test_an_extra_key_halves_the_key_jaccard(b):
    r = _score(b, [[b.call(W, city="Paris")]], [b.tc(W, city="Paris", unit="c"), "ok"])
    assert (r.key, r.value) == (APPROX(0.5), 1)
    assert r.tool == APPROX(0.10 + 0.25 + 0.15 * 0.5 + 0.20 + 0.30)


def test_a_missing_parallel_call(b):
    gold = [[b.call(W, city="Paris"), b.call(W, city="Rome")]]
    r = _score(b, gold, [b.tc(W, city="Paris"), "ok"])
    assert r.name == APPROX(2 / 3)  # precision 1, recall 1/2
    assert (r.key, r.value, r.parallel) == (APPROX(0.5), APPROX(0.5), 0)
    assert r.tool == APPROX(0.10 + 0.25 * 2 / 3 + 0.15 * 0.5 + 0.20 * 0.5)


def test_parallel_calls_in_one_block_or_several_blocks_of_one_turn(b):
    gold = [[b.call(W, city="Paris"), b.call(W, city="Rome")]]
    one_block = b.tcs((W, {"city": "Rome"}), (W, {"city": "Paris"}))
    two_blocks = b.tc(W, city="Paris") + "\n" + b.tc(W, city="Rome")
    for turn in (one_block, two_blocks):
        r = _score(b, gold, [turn, "ok"])
        assert _parts(r) == (1, 1, 1, 1, 1) and r.tool == APPROX(1.0)


def test_sequential_calls_for_a_parallel_step_lose_parallel_and_add_a_step(b):
    gold = [[b.call(W, city="Paris"), b.call(W, city="Rome")]]
    r = _score(b, gold, [b.tc(W, city="Paris"), b.tc(W, city="Rome"), "ok"])
    assert _parts(r) == (1, 1, 1, 1, 0)
    assert r.extra_steps == 1
    assert r.tool == APPROX(0.70 - 0.1)


def test_format_counts_invalid_blocks_over_all_turns(b):
    r = _score(
        b,
        [[b.call(W, city="Paris")]],
        [
            '<tool_call>{"name": "get_weather", "arguments": {</tool_call>',
            b.tc(W, city="Paris"),
            "ok",
        ],
    )
    assert r.format == APPROX(0.5) and (r.n_blocks, r.n_valid_blocks) == (2, 1)
    assert r.parallel == 1  # the first *calling* turn is the second one
    assert r.tool == APPROX(0.95)


def test_multi_step_per_call_rewards_follow_the_matching(b):
    gold = [[b.call(W, city="Paris")], [b.call(W, city="Rome")]]
    r = _score(b, gold, [b.tc(W, city="Paris"), b.tc(W, city="London"), "ok"])
    assert r.value == APPROX(0.5) and r.key == 1 and r.extra_steps == 0
    assert r.per_call == (APPROX(1.0), APPROX(0.4 / 0.6))


def test_bfcl_accepted_values_and_omittable_arguments(b):
    accepted = {"base": [10], "height": [5], "unit": ["cm", "centimeters", ""]}
    gold = [[b.call("area", accepted=accepted, base=10, height=5, unit="cm")]]
    cases = [
        ({"base": "10", "height": 5.0}, 1.0, 1.0),  # unit omitted: allowed
        ({"base": 10, "height": 5, "unit": "Centimeters"}, 1.0, 1.0),
        ({"base": 10, "height": 5, "unit": "inches"}, 1.0, 2 / 3),
        ({"base": 10}, 0.5, 2 / 3),  # height is required; unit may be omitted
    ]
    for arguments, key, value in cases:
        r = _score(b, gold, [b.tc("area", **arguments), "ok"])
        assert (r.key, r.value) == (APPROX(key), APPROX(value)), arguments


def test_bfcl_nested_accepted_lists_inside_objects(b):
    accepted = {"params": [{"a": [1, 2], "b": ["x", ""]}]}
    gold = [[b.call("f", accepted=accepted, params={"a": 1, "b": "x"})]]
    assert _score(b, gold, [b.tc("f", params={"a": 2}), "ok"]).value == 1
    assert _score(b, gold, [b.tc("f", params={"a": 3}), "ok"]).value == 0
    assert _score(b, gold, [b.tc("f", params={"a": 1, "c": 0}), "ok"]).value == 0


def _nestful(b):
    return [
        [b.call("find_city", label="var1", landmark="Eiffel Tower")],
        [b.call(W, city="$var1.city$")],
    ]


@pytest.mark.parametrize(
    "city, value",
    [("Paris", 1.0), ("$var1.city$", 1.0), ("paris", 1.0), ("Rome", 0.5)],
)
def test_nestful_references_resolve_from_the_rollouts_own_responses(b, city, value):
    turns = [b.tc("find_city", landmark="Eiffel Tower"), b.tc(W, city=city), "ok"]
    r = _score(b, _nestful(b), turns, [{"city": "Paris"}, {"temperature": 20}])
    assert r.value == APPROX(value)


def test_a_reference_resolves_only_from_earlier_turns(b):
    turn = b.tcs(("find_city", {"landmark": "Eiffel Tower"}), (W, {"city": "Paris"}))
    r = _score(b, _nestful(b), [turn, "ok"], [{"city": "Paris"}, {"temperature": 20}])
    assert r.value == APPROX(0.5)  # Paris was guessed, not read from a response


def test_a_reference_into_a_list_response(b):
    gold = [
        [b.call("search", label="var1", q="x")],
        [b.call("get", id="$var1.items.0.id$")],
    ]
    turns = [b.tc("search", q="x"), b.tc("get", id=7), "ok"]
    r = _score(b, gold, turns, [{"items": [{"id": "7"}]}, {}])
    assert r.value == 1


def test_keyless_gold_calls(b):
    r = _score(b, [[b.call("now")]], [b.tc("now"), "ok"])
    assert (r.key, r.value, r.tool) == (1, 1, APPROX(1.0))


def test_name_f1_is_a_multiset_f1():
    assert name_f1([], []) == 1
    assert name_f1(["a"], []) == 0 and name_f1([], ["a"]) == 0
    assert name_f1(["a", "a", "b"], ["a", "b", "b"]) == APPROX(2 / 3)


def test_weights_are_configurable_and_must_sum_to_one(b):
    config = RewardConfig.model_validate(
        {"process": {"format": 0, "name": 0, "key": 0, "value": 1, "parallel": 0}}
    )
    task = b.task([[b.call(W, city="Paris")]])
    r = score(b.rollout([b.tc(W, city="London"), "ok"]), task, config)
    assert r.tool == 0 and r.per_call == (0.0,)
    assert not r.guard_applied  # a total of 0 is not negative
    with pytest.raises(ValueError, match="sum to 1"):
        RewardConfig.model_validate({"process": {"format": 0.5}})


def b_call_unknown(name):
    return Call(name=name, arguments={}, arguments_known=False)


def test_gold_without_arguments_scores_neither_key_nor_value(b):
    # the authors' verl gold names tools only: arguments nobody knows earn and cost nothing
    gold = [[b_call_unknown(W)]]
    exact = _score(b, gold, [b.tc(W, city="Paris"), "ok"])
    other_args = _score(b, gold, [b.tc(W, city="Oslo", unit="F"), "ok"])
    assert _parts(exact) == _parts(other_args) == (1, 1, 1, 1, 1)
    assert exact.tool == other_args.tool == APPROX(1.0)
    assert exact.per_call == (APPROX(1.0),)
    wrong_tool = _score(b, gold, [b.tc("get_time"), "ok"])
    # name 0: format 0.10 and parallel 0.30 of the 0.65 scored, scaled to the full
    # weight, less the penalty for a call the task did not need
    assert wrong_tool.redundancy_penalty > 0
    assert wrong_tool.tool == APPROX((0.10 + 0.30) / 0.65 - wrong_tool.redundancy_penalty)
    no_call = _score(b, gold, ["I cannot."])
    assert no_call.tool == 0 and no_call.guard_applied


def test_known_and_unknown_arguments_in_one_task(b):
    gold = [[b.call(W, city="Paris"), b_call_unknown("get_time")]]
    r = _score(b, gold, [b.tc(W, city="London") + b.tc("get_time", zone="UTC"), "ok"])
    # key and value over the one gold call whose arguments are known
    assert (r.key, r.value) == (1, 0)
    assert r.tool == APPROX(0.10 + 0.25 + 0.15 + 0.30)
