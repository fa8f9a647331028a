"""The SFT stage as an MLflow run, against a real SQLite store: its params, per-step
loss, learning rate and tokens/s, the task data as a dataset input, the final model; the
SFT model's evaluation logged into it; the report reading it as the ``sft`` arm."""

import json
from pathlib import Path

import pytest
from helpers import tiny_params
from mlflow.tracking import MlflowClient

from slca.config.evaluate import EvaluateParams
from slca.config.steps import SFTParams
from slca.eval import report as report_module
from slca.eval.stages import evaluate
from slca.eval.table import COLUMNS
from slca.tracking import RUN_FILE, experiment_runs, read_inputs, sqlite_uri
from slca.training.sft import STEP_METRICS
from slca.training.stages import run_sft


@pytest.fixture(scope="module")
def sft_run(workspace, tmp_path_factory):
    """``(root, tmp, figures, run id)``: a tracked SFT of the workspace's base model."""
    root, _ = workspace
    tmp = tmp_path_factory.mktemp("sft-run")
    settings = {
        **tiny_params(root)["sft"],
        "out_dir": str(tmp / "sft"),
        "tracking_dir": str(tmp / "mlflow"),
        "system_metrics_s": None,
    }
    figures = run_sft(SFTParams(**settings))
    run_file = json.loads((tmp / "sft" / RUN_FILE).read_text())
    assert run_file["experiment"] == "slca" and run_file["stage"] == "sft"
    return root, tmp, figures, run_file["run_id"]


def test_the_sft_stage_is_a_run_with_params_per_step_metrics_data_and_model(sft_run):
    root, tmp, figures, run_id = sft_run
    client = MlflowClient(sqlite_uri(tmp / "mlflow"))
    run = client.get_run(run_id)
    assert run.info.run_name == "sft" and run.info.status == "FINISHED"
    assert run.data.tags["slca.kind"] == "sft"
    params = run.data.params
    assert params["sft.epochs"] == "2" and params["sft.engine.optim.lr"] == "0.001"
    assert "git.commit" in params and "seed" not in params  # the report's arm stays "sft"
    manifest = json.loads((root / "data/tasks/manifest.json").read_text())
    train_hash = manifest["content_sha256"]["train"]
    assert params["data_hash.read.train"] == train_hash
    steps = int(figures["sft/steps"])
    for key in STEP_METRICS:
        assert [m.step for m in client.get_metric_history(run_id, key)] == list(
            range(1, steps + 1)
        ), key
    assert all(m.value > 0 for m in client.get_metric_history(run_id, "sft/tokens_per_s"))
    assert run.data.metrics["sft/last_loss"] == pytest.approx(figures["sft/last_loss"])
    # the task data it trained on: the Dataset column of the runs table
    (dataset,) = read_inputs(run.inputs)
    assert dataset == {
        "name": "tasks/train",
        "digest": train_hash[:36],
        "source": str((root / "data/tasks/train.parquet").resolve()),
        "context": "training",
        "content_sha256": train_hash,
    }
    assert json.loads(run.inputs.dataset_inputs[0].dataset.profile)["num_rows"] > 0
    (logged,) = client.search_logged_models(experiment_ids=[run.info.experiment_id])
    assert logged.source_run_id == run_id


def test_the_sft_models_evaluation_is_logged_into_the_sft_run_and_reported(sft_run):
    root, tmp, figures, run_id = sft_run
    settings = {
        **tiny_params(root)["evaluate"],
        "model_dir": str(tmp / "sft"),
        "report_path": str(tmp / "eval/sft.json"),
        "tracking_dir": str(tmp / "mlflow"),
        "run_name": "sft",
        "system_metrics_s": 0.5,  # checked below
    }
    metrics = evaluate(EvaluateParams.model_validate(settings))
    (run,) = experiment_runs(tmp / "mlflow")  # no run of its own: the SFT run holds it
    assert run.run_id == run_id
    assert run.metrics["eval/in_domain/process"] == metrics["in_domain/process"]
    assert run.metrics["sft/last_loss"] == pytest.approx(figures["sft/last_loss"])
    client = MlflowClient(sqlite_uri(tmp / "mlflow"))
    assert {a.path for a in client.list_artifacts(run_id, "eval")} == {
        "eval/sft.json",
        "eval/sft.table.json",
        "eval/sft.tasks.jsonl",
    }
    manifest = json.loads((root / "data/tasks/manifest.json").read_text())["content_sha256"]
    found = {d["name"]: d for d in read_inputs(client.get_run(run_id).inputs)}
    assert (
        {k: (d["context"], d["digest"]) for k, d in found.items()}
        == {
            "tasks/train": ("training", manifest["train"][:36]),
            "tasks/test": ("test", manifest["test"][:36]),  # the in-domain set
            "tasks/val": ("validation", manifest["val"][:36]),  # the value probe
        }
    )
    # the per-task lines as a table the UI's evaluation view shows
    lines = (tmp / "eval/sft.tasks.jsonl").read_text().splitlines()
    saved = json.loads(
        (Path(client.download_artifacts(run_id, "eval/sft.table.json", str(tmp)))).read_text()
    )
    assert saved["columns"] == list(COLUMNS) and len(saved["data"]) == len(lines)
    rows = [dict(zip(saved["columns"], row)) for row in saved["data"]]
    assert {r["verdict"] for r in rows} <= {"pass", "fail", "too_long"}
    assert any(r["output"] for r in rows)
    logged = json.loads(client.get_run(run_id).data.tags["mlflow.loggedArtifacts"])
    assert {"path": "eval/sft.table.json", "type": "table"} in logged
    # the machine's use while it evaluated, after the SFT's own samples (none here)
    cpu = client.get_metric_history(run_id, "system/cpu_utilization_percentage")
    assert len(cpu) >= 2 and sorted(m.step for m in cpu) == list(range(len(cpu)))
    path = report_module.report(tmp / "mlflow", "slca", tmp / "summary")
    assert "| sft | 1 |" in path.read_text()
    summary = json.loads((tmp / "summary/summary.json").read_text())
    assert summary["sft"]["runs"] == [run_id]
    assert "eval/value_probe/value_accuracy" in summary["sft"]["mean"]
