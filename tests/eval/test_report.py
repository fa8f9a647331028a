"""The comparison report: arms, seeds, newest run per seed, table and plots."""

import json

import pytest

from slca.eval.report import (
    LEARNING_FIGURE,
    arm,
    learning_curves,
    markdown_table,
    moving_average,
    paired_differences,
    summarise,
    write_report,
)
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


def test_an_overall_shows_how_many_prompts_it_counted_as_failures():
    runs = [
        run("a", "slca", **{"eval/bfcl/overall": 0.1, "eval/bfcl/too_long": 12.0}),
        run("b", "grpo", **{"eval/bfcl/overall": 0.2, "eval/bfcl/too_long": 0.0}),
    ]
    table = markdown_table(summarise(runs))
    assert "| slca | 1 | 10 ± 0 (12 too long) |" in table
    assert "| grpo | 1 | 20 ± 0 |" in table


def lines(successes):
    return [
        {"set": "in_domain", "task_id": f"t{i}", "process": float(ok), "redundant": 1 - ok}
        for i, ok in enumerate(successes)
    ]


def test_every_arm_is_compared_with_grpo_and_sft_task_by_task(tmp_path):
    runs = [
        run("sft", name="eval-sft"),
        run("g0", "grpo", "0"),
        run("g1", "grpo", "1"),
        run("s0", "slca", "0"),
        run("s1", "slca", "1"),
    ]
    per_run = {
        "sft": lines([0, 0, 0, 0]),
        "g0": lines([1, 0, 0, 0]),
        "g1": lines([0, 1, 0, 0]),
        "s0": lines([1, 1, 1, 0]),
        "s1": lines([1, 1, 0, 1]),
    }
    paired = paired_differences(summarise(runs), per_run)
    assert set(paired) == {"grpo", "slca"}
    assert paired["slca"]["vs_grpo"]["success_points"]["mean"] == pytest.approx(50.0)
    assert paired["slca"]["vs_sft"]["success_points"]["mean"] == pytest.approx(75.0)
    assert paired["slca"]["vs_grpo"]["redundant_per_task"]["mean"] == pytest.approx(-0.5)
    assert set(paired["grpo"]) == {"vs_sft"}
    text = write_report(runs, tmp_path / "out", "t", per_run).read_text()
    assert "| slca | +50.0 [" in text and "| grpo | – | +25.0 [" in text
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary["slca"]["paired"]["vs_sft"]["success_points"]["seeds"] == 2
    missing = {**per_run, "g1": None}
    assert set(paired_differences(summarise(runs), missing)["slca"]) == {"vs_sft"}


def test_arms_that_succeed_on_the_same_tasks_print_no_difference_observed(tmp_path):
    runs = [run("sft", name="eval-sft"), run("g0", "grpo", "0"), run("s0", "slca", "0")]
    per_run = {"sft": lines([0, 0, 1]), "g0": lines([1, 0, 1]), "s0": lines([1, 0, 1])}
    text = write_report(runs, tmp_path / "out", "t", per_run).read_text()
    assert "| slca | no difference observed (3 tasks) |" in text
    assert "[+0.0, +0.0]" not in text


def test_moving_average_is_trailing_and_starts_at_the_first_step():
    assert moving_average([1, 2, 3, 4, 5], 2) == [1, 1.5, 2.5, 3.5, 4.5]
    assert moving_average([0, 0, 0, 0, 5, 5, 5], 5) == [0, 0, 0, 0, 1, 2, 3]
    assert moving_average([3, 1, 2], 1) == [3, 1, 2]
    assert moving_average([2, 4], 10) == [2, 3]  # fewer steps than the window: all so far
    assert moving_average([], 5) == []
    with pytest.raises(ValueError, match="window"):
        moving_average([1], 0)


def learning_runs():
    """Two GRPO seeds and one SLCA seed, each validated at steps 0, 2 and 4."""

    def curves(val, reward):
        return {
            "val/success_at_0.9": list(zip([0, 2, 4], val)),
            "reward/total": list(zip([1, 2, 3, 4], reward)),
        }

    return [
        run("g0", "grpo", "0", curves=curves([0.2, 0.3, 0.4], [0.0, 1.0, 0.0, 1.0])),
        run("g1", "grpo", "1", curves=curves([0.2, 0.5, 0.6], [1.0, 1.0, 1.0, 1.0])),
        run("s0", "slca", "0", curves=curves([0.2, 0.6, 0.7], [0.0, 0.0, 0.0, 4.0])),
        run("sft", name="eval-sft", **{"eval/in_domain/success_at_0.9": 0.2}),
    ]


def test_learning_curves_start_at_step_0_and_average_each_run_then_the_seeds():
    val, reward = learning_curves(learning_runs(), window=2)
    assert set(val) == {"grpo", "slca"}  # the SFT evaluation has no curve
    assert sorted(val["grpo"]) == [0, 2, 4] and val["grpo"][0] == [0.2, 0.2]
    assert val["slca"][4] == [0.7]
    # each run's reward over its last 2 steps, then the seeds side by side
    assert reward["grpo"] == {1: [0.0, 1.0], 2: [0.5, 1.0], 3: [0.5, 1.0], 4: [0.5, 1.0]}
    assert reward["slca"] == {1: [0.0], 2: [0.0], 3: [0.0], 4: [2.0]}


def test_the_learning_figure_is_written_when_runs_validated(tmp_path):
    text = write_report(learning_runs(), tmp_path / "out", "t").read_text()
    assert f"![learning curves]({LEARNING_FIGURE})" in text
    assert "moving average over 5 steps" in text and "step 0 being the SFT policy" in text
    assert (tmp_path / "out" / LEARNING_FIGURE).stat().st_size > 0
    unvalidated = [run("a", "slca", curves={"reward/total": [(1, 0.1), (2, 0.3)]})]
    text = write_report(unvalidated, tmp_path / "none", "t").read_text()
    assert LEARNING_FIGURE not in text and not (tmp_path / "none" / LEARNING_FIGURE).exists()


def test_the_value_probe_is_a_column_for_every_arm_that_has_it(tmp_path):
    key = "eval/value_probe/value_accuracy"
    runs = [
        run("sft", name="eval-sft", **{key: 0.75, "eval/in_domain/success_at_0.9": 0.2}),
        run("s0", "slca", **{key: 0.5, "eval/in_domain/success_at_0.9": 0.3}),
        run("g0", "grpo", **{"eval/in_domain/success_at_0.9": 0.25}),
    ]
    table = markdown_table(summarise(runs))
    assert "value probe (val)" in table.splitlines()[0]
    assert "| sft | 1 | 20 ± 0 | 0.75 ± 0 |" in table
    assert "| slca | 1 | 30 ± 0 | 0.5 ± 0 |" in table and "| grpo | 1 | 25 ± 0 | – |" in table
    text = write_report(runs, tmp_path / "out", "t").read_text()
    assert "value probe (val): the share of string argument values" in text
    assert "value probe" not in markdown_table(summarise(runs[2:]))


def test_the_learning_figure_goes_into_a_finished_run(tmp_path):
    """MLflow takes an artifact into a run that has ended: the report logs its figure
    into the training runs, which are all finished by then."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from slca.eval.report import log_learning_figure
    from slca.tracking import Tracker

    with Tracker(tmp_path / "mlflow", experiment="e") as tracker:
        tracker.start(run_name="grpo")
        run_id = tracker.run_id
    figure = tmp_path / LEARNING_FIGURE
    figure.write_bytes(b"png")
    log_learning_figure(figure, [run_id], tmp_path / "mlflow", "e")
    client = MlflowClient(tracker.tracking_uri)
    assert [a.path for a in client.list_artifacts(run_id, "report")] == [
        f"report/{LEARNING_FIGURE}"
    ]
    assert client.get_run(run_id).info.status == "FINISHED"
