"""The two-head bandit (benchmarks/credit/bandit.py): the credit lab without the LM,
played through the pipeline's estimators, under AdamW and SGD."""

from __future__ import annotations

import json
import statistics

import pytest

from benchmarks.credit import bandit
from slca.eval.lab import steps_to_threshold


def steps(method, spread, optimizer, lr, seeds=21, tasks=8):
    return [
        steps_to_threshold(
            bandit.run_bandit(
                method, spread, optimizer=optimizer, lr=lr, steps=60, seed=s, tasks_per_step=tasks
            ),
            bandit.THRESHOLD,
            bandit.WINDOW,
        )
        or 61
        for s in range(seeds)
    ]


@pytest.mark.parametrize(("optimizer", "lr"), [("sgd", 0.5), ("adamw", 0.1)])
def test_without_a_summary_reward_the_two_estimators_train_the_tool_alike(optimizer, lr):
    # spread 0: both give the tool token z(R_tool), and the seed draws the same tools
    for seed in (0, 1):
        grpo = bandit.run_bandit("grpo", 0.0, optimizer=optimizer, lr=lr, steps=20, seed=seed)
        slca = bandit.run_bandit("slca", 0.0, optimizer=optimizer, lr=lr, steps=20, seed=seed)
        assert grpo == slca
        assert statistics.mean(v for _, v in grpo[-5:]) > grpo[0][1]  # it learns


def test_under_sgd_summary_noise_slows_grpo_and_not_slca():
    slca = [statistics.median(steps("slca", spread, "sgd", 0.5)) for spread in (0.5, 2.0)]
    grpo = [statistics.median(steps("grpo", spread, "sgd", 0.5)) for spread in (0.5, 2.0)]
    assert slca[1] <= slca[0] + 2  # SLCA's tool advantage does not see the spread
    assert grpo[1] >= grpo[0] + 4  # GRPO's one scalar carries the summary's noise
    assert slca[1] <= 0.85 * grpo[1]


def test_under_adamw_the_estimators_tie_at_the_labs_batch_and_not_at_a_small_one():
    grpo = statistics.median(steps("grpo", 2.0, "adamw", 0.1))
    slca = statistics.median(steps("slca", 2.0, "adamw", 0.1))
    assert abs(slca / grpo - 1) <= 0.1
    # one group a step: GRPO's tool gradient is noisy enough for AdamW to see it
    grpo = statistics.median(steps("grpo", 2.0, "adamw", 0.1, tasks=1))
    slca = statistics.median(steps("slca", 2.0, "adamw", 0.1, tasks=1))
    assert slca <= 0.85 * grpo


def test_an_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="adamw or sgd"):
        bandit.run_bandit("grpo", 1.0, optimizer="adam", lr=0.1, steps=1, seed=0)


def test_the_report_is_written(tmp_path, capsys):
    argv = ["--seeds", "3", "--steps", "30", "--spreads", "2", "--adamw-lrs", "0.1"]
    argv += ["--sgd-lrs", "0.5", "--tasks-per-step", "8", "1", "--out", str(tmp_path)]
    assert bandit.main(argv) == 0
    result = json.loads((tmp_path / "bandit.json").read_text())
    cells = {(r["tasks_per_step"], r["optimizer"], r["method"]) for r in result["rows"]}
    assert cells == {(t, o, m) for t in (8, 1) for o in ("adamw", "sgd") for m in ("grpo", "slca")}
    table = (tmp_path / "bandit.md").read_text()
    assert "| 8 × 4 | sgd | 0.5 |" in table and "| 1 × 4 | adamw | 0.1 |" in table
    assert table in capsys.readouterr().out
