"""In-domain metrics: known answers on hand-made breakdowns."""

import dataclasses

import pytest

from slca.eval.in_domain import in_domain_metrics
from slca.rewards.score import RewardBreakdown


def breakdown(**over) -> RewardBreakdown:
    fields = dict(
        tool=1.0, summary=0.5, mode="process", tool_raw=1.0, format=1.0, name=1.0, key=1.0,
        value=1.0, parallel=1.0, success=1.0, unique=1.0, duplicate_calls=0,
        unneeded_tool_calls=0, no_call_task_calls=0, extra_steps=0, redundancy_penalty=0.0,
        n_calls=1, n_blocks=1, n_valid_blocks=1, needs_call=True, has_call=True,
        guard_applied=False, summary_raw=0.5, per_call=(1.0,),
    )  # fmt: skip
    return RewardBreakdown(**{**fields, **over})


def test_known_answers():
    perfect = breakdown()
    near = breakdown(tool=0.89, name=0.5, key=0.5, value=0.25, summary_raw=0.0)
    redundant = breakdown(tool=0.95, n_calls=3, duplicate_calls=1, unneeded_tool_calls=1)
    silent_no_call = breakdown(needs_call=False, n_calls=0, n_blocks=0, summary_raw=1.0)
    calling_no_call = breakdown(needs_call=False, tool=0.4, no_call_task_calls=2, n_calls=2)
    m = in_domain_metrics([perfect, near, redundant, silent_no_call, calling_no_call])
    assert m["in_domain/success_at_0.9"] == pytest.approx(3 / 5)  # 0.89 misses the bar
    assert m["in_domain/process"] == pytest.approx((1 + 0.89 + 0.95 + 1 + 0.4) / 5)
    assert m["in_domain/name_f1"] == pytest.approx((1 + 0.5 + 1 + 1 + 1) / 5)
    assert m["in_domain/value"] == pytest.approx((1 + 0.25 + 1 + 1 + 1) / 5)
    assert m["in_domain/summary"] == pytest.approx((0.5 + 0 + 0.5 + 1 + 0.5) / 5)
    assert m["in_domain/tool_calls_per_task"] == pytest.approx((1 + 1 + 3 + 0 + 2) / 5)
    assert m["in_domain/redundant_calls_per_task"] == pytest.approx((0 + 0 + 2 + 0 + 2) / 5)
    assert m["in_domain/no_call_accuracy"] == pytest.approx(1 / 2)
    assert m["in_domain/tasks"] == 5


def test_guarded_summary_counts_as_zero_and_no_call_metric_needs_such_tasks():
    guarded = breakdown(tool=0.0, summary=-1.0, summary_raw=None, guard_applied=True, n_calls=0)
    m = in_domain_metrics([guarded])
    assert m["in_domain/summary"] == 0.0 and m["in_domain/success_at_0.9"] == 0.0
    assert "in_domain/no_call_accuracy" not in m


def test_prompts_that_do_not_fit_count_as_failures_in_success_only():
    m = in_domain_metrics([breakdown(), breakdown(tool=0.5)], too_long=2)
    assert m["in_domain/success_at_0.9"] == pytest.approx(1 / 4)  # out of every task drawn
    assert m["in_domain/process"] == pytest.approx(0.75)  # the means describe what ran
    assert m["in_domain/tasks"] == 2
    assert in_domain_metrics([], too_long=3) == {
        "in_domain/success_at_0.9": 0.0,
        "in_domain/tasks": 0.0,
    }


def test_errors():
    with pytest.raises(ValueError, match="no rollouts"):
        in_domain_metrics([])
    with pytest.raises(ValueError, match="too_long must be >= 0"):
        in_domain_metrics([breakdown()], too_long=-1)
    with pytest.raises(ValueError, match="process-mode"):
        in_domain_metrics([dataclasses.replace(breakdown(), mode="execution")])


def test_the_threshold_tolerates_float_sums_of_the_weights():
    from slca.config.rewards import ProcessWeights

    w = ProcessWeights()
    all_but_format = w.name + w.key + w.value + w.parallel  # 0.8999999999999999
    m = in_domain_metrics([breakdown(tool=all_but_format), breakdown(tool=0.8999)])
    assert m["in_domain/success_at_0.9"] == 0.5
