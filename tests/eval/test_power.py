"""Power of the paired sampled-pass@1 design: known answers, bounds and error paths."""

import math

import numpy as np
import pytest

from slca.eval.power import main, minimum_detectable_effect, sampled_variance


def test_the_beta_fit_reproduces_both_moments_it_was_given():
    v = sampled_variance(0.5727, 0.7907, 4)
    a, b = v.beta
    p = np.random.default_rng(0).beta(a, b, 400_000)
    assert p.mean() == pytest.approx(0.5727, abs=3e-3)
    assert 1 - ((1 - p) ** 4).mean() == pytest.approx(0.7907, abs=3e-3)
    assert (p * (1 - p)).mean() == pytest.approx(v.fitted, abs=2e-3)
    assert v.fitted < v.bound == pytest.approx(0.5727 * 0.4273)


def test_best_of_g_near_its_floor_means_tasks_are_all_or_nothing():
    """Best of G barely above pass@1: every task is (nearly) always or never solved."""
    v = sampled_variance(0.5, 0.5001, 4)
    assert v.fitted < 0.01


def test_the_mde_known_answer_and_scaling():
    z = 1.959964 + 0.841621
    mde = minimum_detectable_effect(0.25, tasks=100, seeds=1, samples=1)
    assert mde == pytest.approx(z * math.sqrt(0.5 / 100), rel=1e-5)
    # four times the samples halve it
    assert minimum_detectable_effect(0.25, tasks=400, seeds=1, samples=1) == pytest.approx(mde / 2)
    assert minimum_detectable_effect(0.25, tasks=100, seeds=2, samples=2) == pytest.approx(mde / 2)


def test_the_mde_holds_its_power_in_simulation():
    """At the MDE, a paired z-test rejects in about 80 % of simulated experiments."""
    rng = np.random.default_rng(1)
    tasks, k = 200, 8
    p = rng.beta(2, 2, tasks)
    variance = float((p * (1 - p)).mean())
    effect = minimum_detectable_effect(variance, tasks=tasks, seeds=1, samples=k)
    hits = 0
    for _ in range(400):
        a = rng.binomial(k, np.clip(p + effect, 0, 1)) / k
        b = rng.binomial(k, p) / k
        d = a - b
        hits += d.mean() / (d.std(ddof=1) / math.sqrt(tasks)) > 1.959964
    assert 0.7 < hits / 400 < 0.9


def test_errors_name_the_figures():
    with pytest.raises(ValueError, match="pass1 < best_of_g"):
        sampled_variance(0.8, 0.7, 4)
    with pytest.raises(ValueError, match="no Beta"):
        sampled_variance(0.5, 0.99, 4)  # above 1 − 0.5^4: more than any p distribution
    with pytest.raises(ValueError, match="tasks, seeds and samples"):
        minimum_detectable_effect(0.2, tasks=0, seeds=1, samples=1)


def test_the_cli_prints_both_figures(capsys):
    args = ["--pass1", "0.5727", "--best-of-g", "0.7907", "--group-size", "4"]
    assert main([*args, "--tasks", "200", "--seeds", "3", "--samples", "8"]) == 0
    out = capsys.readouterr().out
    assert "Beta fit" in out and "upper bound" in out
