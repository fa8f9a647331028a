"""The Prefect artifacts (ADR 0082), read back from the Prefect test server: the keys
follow Prefect's rule, a failed validation shows which expectations failed, the
comparison links every run to its MLflow UI page, and an artifact that cannot be made
fails no flow. The pipeline's own artifacts: tests/slca_pipeline/flows/test_flows.py."""

import asyncio
import json
import re

import pytest
from prefect import flow

import slca_pipeline.tasks.data
from slca.advantages import available_estimators
from slca.config.data import ValidateParams
from slca_pipeline.tasks import artifacts
from slca_pipeline.tasks.data import ValidationFailed, validate_task
from slca_pipeline.tasks.steps import run_step

mlflow = pytest.importorskip("mlflow")

#: Great Expectations' result as run_suite returns it: a column check met, one failed,
#: a table-level check with a row condition, and one that could not be evaluated.
RESULT = {
    "success": False,
    "results": [
        {
            "success": True,
            "expectation_config": {
                "type": "expect_column_values_to_be_unique",
                "kwargs": {"column": "id"},
            },
            "result": {"unexpected_count": 0, "element_count": 40},
            "exception_info": {"raised_exception": False},
        },
        {
            "success": False,
            "expectation_config": {
                "type": "expect_request_keys_to_stay_in_one_split",
                "kwargs": {"column_A": "request_key", "column_B": "split"},
            },
            "result": {"unexpected_count": 3, "element_count": 40},
            "exception_info": {"raised_exception": False},
        },
        {
            "success": True,
            "expectation_config": {
                "type": "expect_table_row_count_to_be_between",
                "kwargs": {
                    "min_value": 1,
                    "row_condition": {"pass_through_filter": 'split=="val"'},
                },
            },
            "result": {"observed_value": 3},
            "exception_info": {"raised_exception": False},
        },
        {
            "success": False,
            "expectation_config": {
                "type": "expect_column_values_to_not_be_null",
                "kwargs": {"column": "gold"},
            },
            "result": {},
            "exception_info": {"raised_exception": True, "exception_message": "KeyError: 'gold'"},
        },
    ],
}

ROWS = [
    {
        "expectation": "expect_column_values_to_be_unique",
        "on": "id",
        "result": "pass",
        "detail": "0 of 40 fail",
    },
    {
        "expectation": "expect_request_keys_to_stay_in_one_split",
        "on": "request_key, split",
        "result": "fail",
        "detail": "3 of 40 fail",
    },
    {
        "expectation": "expect_table_row_count_to_be_between",
        "on": 'rows split=="val"',
        "result": "pass",
        "detail": "observed 3",
    },
    {
        "expectation": "expect_column_values_to_not_be_null",
        "on": "gold",
        "result": "error",
        "detail": "",
    },
]


def test_every_key_follows_prefects_rule():
    keys = [artifacts.COMPARISON_KEY, artifacts.VALIDATION_KEY]
    keys += [artifacts.training_key(e) for e in available_estimators()]
    assert all(re.fullmatch(r"[a-z0-9-]+", k) for k in keys), keys
    assert artifacts.training_key("dr_grpo") == "slca-train-dr-grpo"
    assert len(set(keys)) == len(keys)


def test_each_expectation_is_one_row_met_failed_or_not_evaluated():
    assert artifacts.validation_rows(RESULT) == ROWS


def flow_run_artifacts(state):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read():
        async with get_client() as client:
            runs = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
            return {a.key: a for a in await client.read_artifacts(flow_run_filter=runs)}

    return asyncio.run(read())


@flow
def validating(params: ValidateParams, state_dir: str) -> list[str]:
    return run_step(validate_task, params, state_dir)


@pytest.mark.slow
def test_a_failed_validation_publishes_its_table_before_failing(
    prefect_harness, tmp_path, monkeypatch
):
    monkeypatch.setattr(slca_pipeline.tasks.data, "load_frame", lambda in_dir: None)
    monkeypatch.setattr(
        slca_pipeline.tasks.data,
        "run_suite",
        lambda *args, **kwargs: (False, ["request keys in two splits"], RESULT),
    )
    params = ValidateParams(in_dir=str(tmp_path / "tasks"), report_dir=str(tmp_path / "v"))
    state = validating(params, str(tmp_path / "state"), return_state=True)
    assert state.is_failed()
    with pytest.raises(ValidationFailed, match="request keys in two splits"):
        state.result()
    table = flow_run_artifacts(state)["slca-validation"]
    assert json.loads(table.data) == ROWS
    assert table.description == (
        f"task data {tmp_path / 'tasks'}: 2 of 4 expectations met; report: {tmp_path / 'v'}"
    )


@pytest.fixture
def store(tmp_path):
    """An MLflow store with an SFT and a GRPO run, and a report on them as
    slca.eval.report.write_report lays it out."""
    from slca.tracking import sqlite_uri

    uri = sqlite_uri(tmp_path / "mlflow")
    client = mlflow.tracking.MlflowClient(uri)
    experiment = client.create_experiment("e")
    ids = {arm: client.create_run(experiment, run_name=arm).info.run_id for arm in ("sft", "grpo")}
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.md").write_text(
        "# slca: experiment 'e'\n\n| arm | Success@0.9 (%) |\n|---|---|\n| grpo | 50.0 |\n"
        "| sft | 25.0 |\n\n![learning curves](curve_learning.png)\n\n"
        f"Runs: grpo: {ids['grpo']}; sft: {ids['sft']}\n"
    )
    summary = {arm: {"runs": [run_id], "seeds": 1} for arm, run_id in ids.items()}
    (out / "summary.json").write_text(json.dumps(summary))
    return tmp_path, experiment, ids


@pytest.mark.slow
def test_the_comparison_holds_the_tables_and_a_link_to_every_run(prefect_harness, store):
    root, experiment, ids = store

    @flow
    def reporting():
        artifacts.publish_comparison(root / "report" / "report.md", str(root / "mlflow"))
        artifacts.publish_training_run("dr_grpo", ids["grpo"], str(root / "mlflow"))

    found = flow_run_artifacts(reporting(return_state=True))
    page = f"http://127.0.0.1:5000/#/experiments/{experiment}/runs/"
    text = found["slca-comparison"].data
    assert text.startswith("# slca: experiment 'e'\n\n| arm | Success@0.9 (%) |")
    assert "| sft | 25.0 |" in text
    for arm, run_id in ids.items():
        assert f"- {arm}: [{run_id}]({page}{run_id})" in text
    assert f"slca ui --tracking-dir {(root / 'mlflow').resolve()}" in text
    assert "![" not in text and "Runs: " not in text  # figures and bare ids: the links replace them
    assert found["slca-comparison"].type == "markdown"
    link = found["slca-train-dr-grpo"].data
    assert link == f"[MLflow run {ids['grpo']} (dr_grpo)]({page}{ids['grpo']})"


@pytest.mark.slow
def test_an_artifact_that_cannot_be_made_fails_no_flow(prefect_harness, store):
    root, _, _ = store

    @flow
    def linking():
        artifacts.publish_training_run("grpo", "0" * 32, str(root / "mlflow"))  # no such run
        artifacts.publish_comparison(root / "missing" / "report.md", str(root / "mlflow"))
        return "done"

    state = linking(return_state=True)
    assert state.result() == "done"
    assert flow_run_artifacts(state) == {}
