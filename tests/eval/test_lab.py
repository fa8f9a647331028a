"""Steps to a threshold and the censored median: known answers and bad input."""

import math

import pytest

from slca.eval.lab import censored_median, format_steps, steps_to_threshold, trailing_mean


def test_trailing_mean_averages_what_there_is_at_the_start():
    curve = [(1, 0.0), (2, 1.0), (3, 0.5), (4, 0.5)]
    assert trailing_mean(curve, 2) == [(1, 0.0), (2, 0.5), (3, 0.75), (4, 0.5)]
    assert trailing_mean(curve, 1) == curve


def test_steps_to_threshold_needs_the_trailing_mean_not_one_lucky_step():
    curve = [(1, 0.5), (2, 1.0), (3, 0.6), (4, 0.95), (5, 0.95), (6, 0.95)]
    assert steps_to_threshold(curve, 0.9, window=1) == 2
    assert steps_to_threshold(curve, 0.9, window=3) == 6  # (0.95*3)/3; step 5: 0.833
    assert steps_to_threshold(curve, 0.99, window=3) is None
    assert steps_to_threshold([], 0.9, window=3) is None


def test_censored_median_counts_a_censored_run_as_beyond_the_budget():
    assert censored_median([30, 40, 50, 60, 70], cap=100) == 50
    assert censored_median([30, None, 50, None, 70], cap=100) == 70
    assert math.isinf(censored_median([30, None, None, None, 70], cap=100))
    assert censored_median([30, 40, 50, 60], cap=100) == 45
    assert math.isinf(censored_median([30, 40, None, None], cap=100))
    assert format_steps(censored_median([None], cap=100), 100) == ">100"
    assert format_steps(45.0, 100) == "45" and format_steps(37.5, 100) == "37.5"


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="window"):
        trailing_mean([(1, 0.0)], 0)
    with pytest.raises(ValueError, match="strictly increasing"):
        trailing_mean([(2, 0.0), (1, 0.0)], 2)
    with pytest.raises(ValueError, match="no runs"):
        censored_median([], cap=10)
    with pytest.raises(ValueError, match=r"outside \[1, 10\]"):
        censored_median([11], cap=10)
