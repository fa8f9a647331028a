"""The comparison report: arms, seeds, newest run per seed, table and plots."""

import json

import pytest

from slca.eval.report import arm, markdown_table, summarise, write_report
from slca.tracking import RunRecord


def run(run_id, estimator=None, seed="0", t=0, name=None, curves=None, **metrics):
    params = {} if estimator is None else {"algorithm.advantage.estimator": estimator, "seed": seed}
    return RunRecord(
        run_id=run_id,
        name=name or run_id,
        start_time=t,
        params=params,
        metrics=metrics,
        curves=curves or {},
    )


def test_arm_labels():
    assert arm(run("a", "slca")) == "slca"
    per_call = run("b", "slca")
    per_call.params["algorithm.advantage.granularity"] = "per_call"
    assert arm(per_call) == "slca/per_call"
    weighted = run("c", "grpo")
    weighted.params["algorithm.advantage.weights.summary"] = "0.5"
    assert arm(weighted) == "grpo/w_sum=0.5"
    assert arm(run("d", name="eval-sft")) == "sft"
    reference = run("e", "slca")
    reference.params["algorithm.profile"] = "reference"
    assert arm(reference) == "slca/reference"
    default = run("f", "grpo")
    default.params["algorithm.profile"] = "default"
    assert arm(default) == "grpo"  # runs logged before profiles existed match it too


def test_both_profiles_land_in_one_table_as_separate_arms():
    key = "eval/in_domain/success_at_0.9"
    runs = []
    for i, (estimator, profile, value) in enumerate(
        [("slca", "default", 0.4), ("slca", "reference", 0.2), ("grpo", "reference", 0.3)]
    ):
        r = run(f"r{i}", estimator, **{key: value})
        r.params["algorithm.profile"] = profile
        runs.append(r)
    table = markdown_table(summarise(runs))
    assert "| slca | 1 | 40" in table and "| slca/reference | 1 | 20" in table
    assert "| grpo/reference | 1 | 30" in table


def test_seeds_aggregate_and_the_newest_run_of_a_seed_wins():
    key = "eval/in_domain/success_at_0.9"
    runs = [
        run("old", "slca", "0", t=1, **{key: 0.0}),
        run("s0", "slca", "0", t=2, **{key: 0.4}),
        run("s1", "slca", "1", t=3, **{key: 0.6}),
        run("g0", "grpo", "0", t=4, **{key: 0.3}),
    ]
    by_arm = {s.arm: s for s in summarise(runs)}
    assert by_arm["slca"].run_ids == ["s0", "s1"]
    assert by_arm["slca"].mean[key] == pytest.approx(0.5)
    assert by_arm["slca"].std[key] == pytest.approx(0.1414, abs=1e-3)
    assert by_arm["grpo"].std[key] == 0.0
    table = markdown_table(list(by_arm.values()))
    assert "| slca | 2 | 50 ± 14 |" in table and "BFCL" not in table


def test_write_report_files(tmp_path):
    curves = {"reward/total": [(1, 0.1), (2, 0.3)]}
    runs = [
        run("a", "slca", curves=curves, **{"eval/in_domain/process": 0.5, "reward/total": 0.3}),
        run("b", "grpo", curves=curves, **{"eval/in_domain/process": 0.4, "reward/total": 0.3}),
    ]
    path = write_report(runs, tmp_path / "out", "test")
    text = path.read_text()
    assert "| slca | 1 | 0.5 ± 0 |" in text and "curve_reward_total.png" in text
    assert (tmp_path / "out/curve_reward_total.png").stat().st_size > 0
    assert (tmp_path / "out/eval.png").stat().st_size > 0
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary["grpo"]["mean"]["eval/in_domain/process"] == 0.4
    with pytest.raises(ValueError, match="no finished run"):
        write_report([], tmp_path / "none", "x")
