"""The flows end to end on the tiny configuration, under a Prefect test server.

One pipeline run is made to fail in its first RL run after one checkpointed cycle; the
re-run must keep every earlier output, skip the completed steps, continue the RL run
from its checkpoint (same MLflow run) and finish the second one; a third run skips all.
"""

import json
from pathlib import Path

import pytest

import slca.config.loader
import slca.training.rl
import slca_pipeline.tasks.data
import slca_pipeline.tasks.training
from slca.config import ConfigError

mlflow = pytest.importorskip("mlflow")

pytestmark = pytest.mark.slow


def snapshot(root):
    """mtime of every file under root's outputs: any rewrite shows."""
    return {
        str(p.relative_to(root)): p.stat().st_mtime_ns
        for sub in ("data", "models/base", "models/sft")
        for p in (root / sub).rglob("*")
        if p.is_file()
    }


class Calls:
    def __init__(self, monkeypatch):
        self.counts = {}
        for module, name in (
            (slca_pipeline.tasks.data, "prepare"),
            (slca_pipeline.tasks.data, "run_suite"),
            (slca_pipeline.tasks.training, "build_base_model"),
            (slca_pipeline.tasks.training, "run_sft"),
            (slca_pipeline.tasks.training, "training_session"),
        ):
            self._spy(monkeypatch, module, name)
        # every params file a flow reads, by the one function that opens and parses it
        self.reads = []
        real_read = slca.config.loader._sections

        def read(path, *args, **kwargs):
            self.reads.append(Path(path).resolve())
            return real_read(path, *args, **kwargs)

        monkeypatch.setattr(slca.config.loader, "_sections", read)

    def _spy(self, monkeypatch, module, name):
        real = getattr(module, name)

        def spy(*args, **kwargs):
            self.counts[name] = self.counts.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)


@pytest.fixture(scope="module")
def runs(prefect_harness, tmp_path_factory, write_tiny_params):
    from _pytest.monkeypatch import MonkeyPatch

    from slca_pipeline.flows.pipeline import pipeline

    root = tmp_path_factory.mktemp("pipeline")
    params = write_tiny_params(root)
    state = root / "state"
    out = {"root": root}

    with MonkeyPatch.context() as mp:
        calls = Calls(mp)
        real_learn = slca.training.rl.Trainer.learn

        def fail_on_second_cycle(self, sampled, scores):
            if self.state.step == 1:
                raise RuntimeError("injected failure in RL cycle 2")
            return real_learn(self, sampled, scores)

        mp.setattr(slca.training.rl.Trainer, "learn", fail_on_second_cycle)
        failed = pipeline(params_file=params, state_dir=state, return_state=True)
        out["failed"] = failed
        out["failed_calls"] = dict(calls.counts)
        out["failed_reads"] = calls.reads.count(params.resolve())
    out["after_failure"] = snapshot(root)
    out["checkpoints_after_failure"] = sorted(p.name for p in (root / "ckpt/grpo").glob("step_*"))

    with MonkeyPatch.context() as mp:
        calls = Calls(mp)
        out["resumed"] = pipeline(params_file=params, state_dir=state)
        out["resumed_calls"] = dict(calls.counts)
        out["resumed_reads"] = calls.reads.count(params.resolve())
    out["after_resume"] = snapshot(root)

    with MonkeyPatch.context() as mp:
        calls = Calls(mp)
        out["again"] = pipeline(params_file=params, state_dir=state)
        out["again_calls"] = dict(calls.counts)
        out["again_reads"] = calls.reads.count(params.resolve())
    out["artifacts"] = latest_artifacts(
        "slca-validation", "slca-comparison", "slca-train-grpo", "slca-train-slca"
    )
    return out


def latest_artifacts(*keys):
    """The newest Prefect artifact under each key, read back from the test server."""
    from prefect.artifacts import Artifact

    return {key: Artifact.get(key) for key in keys}


def test_a_failing_task_fails_the_flow_and_keeps_earlier_outputs(runs):
    assert runs["failed"].is_failed()
    assert "injected failure in RL cycle 2" in str(runs["failed"].message)
    # every step before the RL run ran once and completed; the RL run stopped after cycle 1
    assert runs["failed_calls"] == {
        "prepare": 1,
        "run_suite": 1,
        "build_base_model": 1,
        "run_sft": 1,
        "training_session": 1,
    }
    assert runs["checkpoints_after_failure"] == ["step_000001"]
    assert (runs["root"] / "models/sft/config.json").exists()


def test_rerun_skips_completed_steps_and_resumes_the_rl_run(runs):
    root = runs["root"]
    # nothing before the RL runs was rewritten, and only the RL runs were called
    assert runs["after_resume"] == runs["after_failure"]
    assert runs["resumed_calls"] == {"training_session": 2}
    client = mlflow.tracking.MlflowClient(f"sqlite:///{root / 'mlflow/mlflow.db'}")
    grpo, slca_run = (client.get_run(runs["resumed"][e]) for e in ("grpo", "slca"))
    # the interrupted GRPO run continued: one MLflow run, cycles 1 and 2 once each
    assert [m.step for m in client.get_metric_history(grpo.info.run_id, "reward/tool")] == [1, 2]
    assert grpo.data.params["algorithm.advantage.estimator"] == "grpo"
    assert slca_run.data.params["algorithm.advantage.estimator"] == "slca"
    # both RL runs start from the same SFT checkpoint and write their own outputs
    assert grpo.data.params["init_dir"] == slca_run.data.params["init_dir"]
    assert grpo.data.params["init_dir"] == str(root / "models/sft")
    for estimator in ("grpo", "slca"):
        assert (root / "models/rl" / estimator / "config.json").exists()
    summary = json.loads((root / "data/simcheck/summary.json").read_text())
    assert summary["simulated"] > 0


def test_a_third_run_skips_every_step_and_returns_the_same_runs(runs):
    assert runs["again_calls"] == {}
    assert runs["again"] == runs["resumed"]


def test_a_pipeline_run_reads_the_params_file_once(runs):
    # the pipeline reads it and validates every section; its subflows run on that document
    assert (runs["failed_reads"], runs["resumed_reads"], runs["again_reads"]) == (1, 1, 1)


def test_the_pipeline_publishes_validation_training_runs_and_the_comparison(runs):
    root, artifacts = runs["root"], runs["artifacts"]
    client = mlflow.tracking.MlflowClient(f"sqlite:///{root / 'mlflow/mlflow.db'}")

    def page(run_id):  # as `slca ui` serves the store
        experiment = client.get_run(run_id).info.experiment_id
        return f"http://127.0.0.1:5000/#/experiments/{experiment}/runs/{run_id}"

    validation = artifacts["slca-validation"]
    assert validation.type == "table"
    rows = json.loads(validation.data)
    assert len(rows) > 10 and {r["result"] for r in rows} == {"pass"}
    assert {"expectation": "expect_column_values_to_be_unique", "on": "id"}.items() <= next(
        r for r in rows if r["expectation"] == "expect_column_values_to_be_unique"
    ).items()
    assert f"{len(rows)} of {len(rows)} expectations met" in validation.description

    for estimator in ("grpo", "slca"):
        run_id = runs["resumed"][estimator]
        link = artifacts[f"slca-train-{estimator}"]  # Prefect keeps a link as markdown
        assert link.data == f"[MLflow run {run_id} ({estimator})]({page(run_id)})"

    comparison = artifacts["slca-comparison"]
    assert comparison.type == "markdown"
    text = comparison.data
    assert text.startswith("# slca: experiment 'slca'")
    for arm in ("| sft |", "| grpo |", "| slca |"):
        assert arm in text
    for estimator in ("grpo", "slca"):
        run_id = runs["resumed"][estimator]
        assert f"- {estimator}: [{run_id}]({page(run_id)})" in text
    assert f"slca ui --tracking-dir {(root / 'mlflow').resolve()}" in text
    assert "![" not in text  # the figures stay in the report's directory


def test_an_invalid_params_file_fails_before_any_work(prefect_harness, tmp_path, write_tiny_params):
    from slca_pipeline.flows.pipeline import pipeline

    params = write_tiny_params(tmp_path, train={"steps": 0})
    with pytest.raises(ConfigError, match=r"train\.steps: Input should be greater than"):
        pipeline(params_file=params, state_dir=tmp_path / "state")
    assert not (tmp_path / "data").exists() and not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ({"estimators": ["ppo"]}, "estimators"),
        ({"estimators": []}, "estimators"),
        ({"overrides": "train.steps=4"}, "overrides"),
        ({"overrides": {"trian.steps": 4}}, "trian"),
        ({"overrides": {"train.rollout.engine": "tpu"}}, "train.rollout.engine"),
        ({"params_file": "missing.yaml"}, "params_file"),
    ],
)
def test_a_missing_or_invalid_parameter_fails_before_any_work_naming_it(
    prefect_harness, tmp_path, write_tiny_params, call, named
):
    from slca_pipeline.flows.pipeline import pipeline

    params = write_tiny_params(tmp_path)
    call = {"params_file": params, "state_dir": tmp_path / "state", **call}
    if call["params_file"] == "missing.yaml":
        call["params_file"] = tmp_path / "missing.yaml"
    with pytest.raises(Exception, match=named):
        pipeline(**call)
    assert not (tmp_path / "data").exists() and not (tmp_path / "state").exists()


def test_train_rejects_an_unknown_estimator_naming_the_parameter(prefect_harness, tmp_path):
    from prefect.exceptions import ParameterTypeError

    from slca_pipeline.flows.train import train

    with pytest.raises(ParameterTypeError, match="estimator"):
        train(params_file=tmp_path / "params.yaml", estimator="ppo")


def test_each_rl_cycle_runs_as_rollout_score_and_update_tasks(runs):
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from slca_pipeline.flows.train import train

    root = runs["root"]
    state = train(
        params_file=root / "params.yaml",
        state_dir=root / "state",
        estimator="dr_grpo",
        return_state=True,
    )
    assert state.is_completed()

    async def task_runs():
        async with get_client() as client:
            flow_run = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
            return await client.read_task_runs(flow_run_filter=flow_run)

    runs_ = asyncio.run(task_runs())
    kind = {r.id: r.name.rsplit("-", 1)[0] for r in runs_}
    names = sorted(kind.values())
    # validation gates training: the flow runs (here: a cache hit) validate first; the
    # RL stage is one cached `train` task whose cycles run as its own tasks
    expected = ["validate", "train", *["rollout", "score", "update"] * 2]
    assert names == sorted(expected), names
    # the rollouts and scores go in opaque() (not walked token by token), and each task
    # still names the one whose result it took: the graph keeps its edges
    edges = {
        (kind[r.id], arg): sorted(kind[i.id] for i in inputs)
        for r in runs_
        for arg, inputs in r.task_inputs.items()
        if kind[r.id] in ("score", "update") and inputs and arg != "__parents__"
    }
    assert edges == {
        ("score", "sampled"): ["rollout"],
        ("update", "sampled"): ["rollout"],
        ("update", "scores"): ["score"],
    }, edges


def test_cli_eval_and_report_on_the_pipeline_models(runs, monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from slca_pipeline.cli import app

    root = runs["root"]
    monkeypatch.chdir(tmp_path)  # the report directory is relative
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["eval", "--params", str(root / "params.yaml"), "--model", f"sft={root / 'models/sft'}"],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "reports/summary/report.md").exists()
    result = runner.invoke(
        app, ["report", "--tracking-dir", str(root / "mlflow"), "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 0, result.output
    for arm in ("| sft |", "| grpo |", "| slca |"):
        assert arm in result.output
