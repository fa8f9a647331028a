"""Paired differences on shared tasks: known answers, pairing rules and error paths."""

import numpy as np
import pytest

from slca.eval.paired import paired_difference, redundant_by_task, success_by_task


def test_per_task_outcomes_from_evaluation_lines():
    lines = [
        {"set": "in_domain", "task_id": "a", "process": 0.95, "redundant": 1},
        {"set": "in_domain", "task_id": "b", "process": 0.8999999999999999, "redundant": 0},
        {"set": "in_domain", "task_id": "c", "process": 0.5, "redundant": 2},
        {"set": "in_domain", "task_id": "long", "finish": "too_long", "turns": []},
        {"set": "bfcl", "task_id": "x", "valid": True},
    ]
    assert success_by_task(lines) == {"a": 1.0, "b": 1.0, "c": 0.0, "long": 0.0}
    assert redundant_by_task(lines) == {"a": 1.0, "b": 0.0, "c": 2.0}


def test_seeds_pair_by_name_and_the_mean_is_over_seeds_then_tasks():
    arm = {"0": {"t1": 1.0, "t2": 1.0, "t3": 0.0}, "1": {"t1": 1.0, "t2": 0.0, "t3": 0.0}}
    base = {"0": {"t1": 0.0, "t2": 1.0, "t3": 0.0}, "1": {"t1": 0.0, "t2": 0.0, "t3": 1.0}}
    d = paired_difference(arm, base)
    # per task over seeds: t1 +1, t2 0, t3 -0.5
    assert d.mean == pytest.approx(0.5 / 3)
    assert d.tasks == 3 and d.seeds == 2
    assert d.low <= d.mean <= d.high


def test_a_single_baseline_run_pairs_with_every_seed():
    arm = {"0": {"t1": 1.0, "t2": 1.0}, "1": {"t1": 1.0, "t2": 0.0}}
    sft = {"-": {"t1": 0.0, "t2": 0.0}}
    d = paired_difference(arm, sft)
    assert d.mean == pytest.approx(0.75) and d.seeds == 2


def test_only_tasks_every_pair_scored_enter():
    d = paired_difference({"0": {"a": 1.0, "b": 1.0}}, {"0": {"a": 0.0, "c": 1.0}})
    assert d.tasks == 1 and d.mean == 1.0 and (d.low, d.high) == (1.0, 1.0)


def test_the_interval_covers_a_known_shift_and_excludes_zero():
    rng = np.random.default_rng(1)
    n = 400
    base = {f"t{i}": float(rng.random() < 0.3) for i in range(n)}
    better = {t: max(v, float(rng.random() < 0.2)) for t, v in base.items()}
    d = paired_difference({"0": better}, {"0": base})
    true = np.mean([better[t] - base[t] for t in base])
    assert d.mean == pytest.approx(true) and 0 < d.low < true < d.high
    same = paired_difference({"0": base}, {"0": base})
    assert (same.mean, same.low, same.high) == (0.0, 0.0, 0.0) and same.no_difference
    assert not d.no_difference


def test_a_uniform_nonzero_shift_is_degenerate_but_not_no_difference():
    d = paired_difference({"0": {"a": 1.0, "b": 1.0}}, {"0": {"a": 0.0, "b": 0.0}})
    assert (d.low, d.high) == (1.0, 1.0) and not d.no_difference


def test_the_interval_is_reproducible_from_its_seed():
    rng = np.random.default_rng(2)
    arm = {"0": {f"t{i}": float(rng.random() < 0.5) for i in range(50)}}
    base = {"0": {f"t{i}": float(rng.random() < 0.5) for i in range(50)}}
    assert paired_difference(arm, base, seed=3) == paired_difference(arm, base, seed=3)


def test_errors():
    with pytest.raises(ValueError, match="no seed pairs"):
        paired_difference({"0": {"a": 1.0}}, {"1": {"a": 1.0}, "2": {"a": 0.0}})
    with pytest.raises(ValueError, match="share no task"):
        paired_difference({"0": {"a": 1.0}}, {"0": {"b": 1.0}})
    with pytest.raises(ValueError, match="confidence"):
        paired_difference({"0": {"a": 1.0}}, {"0": {"a": 1.0}}, confidence=1.5)
