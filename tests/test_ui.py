"""The MLflow UI in headless Chromium shows the runs, the datasets they read, their
metrics, histograms, system metrics and evaluation tables, and the registered model with
its aliases; the Prefect UI shows a flow run's artifacts.

The store is written by the trainer's own :class:`slca.tracking.Tracker` and the
evaluation's :func:`slca.tracking.log_evaluation` (which moves the aliases); the
artifacts by slca_pipeline/tasks/artifacts.py in a flow run on a real Prefect server. The
check is tools/ui_check.py, the same one `make ui-check` runs on the demo's store. One
store, one MLflow UI and one Prefect server serve every page.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import prefect_api, running_prefect_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ui_check  # noqa: E402

from slca.tracking import RUN_FILE, Tracker, log_evaluation, split_input  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        ui_check.chromium() is None, reason="chromium missing: `make chromium` installs it"
    ),
]

#: A validation result as slca.data.validate.run_suite returns it: one expectation met.
VALIDATION = {
    "results": [
        {
            "success": True,
            "expectation_config": {
                "type": "expect_column_values_to_be_unique",
                "kwargs": {"column": "id"},
            },
            "result": {"unexpected_count": 0, "element_count": 40},
        }
    ]
}


def log_run(directory, experiment, name):
    with Tracker(directory, experiment=experiment) as tracker:
        tracker.start(run_name=name)
        for step in (1, 2):
            tracker.log_metrics({"reward/tool": 0.1 * step, "adv/tool_std": 1.0}, step=step)
        tracker.log_histograms(2, {"tool": np.linspace(-1, 1, 50), "summary": np.zeros(5)})
        return tracker.run_id


def train_and_evaluate(root: Path, experiment: str, name: str) -> str:
    """A run as training and its evaluation leave it: metrics and histograms, the
    training split as a dataset input, its model registered (a logged model without
    files: the UI shows the registry, not the weights), then the evaluation's figures,
    system-metric samples, per-task table and test split, which make the version
    ``champion``."""
    from mlflow.entities import LoggedModelStatus

    from slca.eval.table import evaluation_table
    from slca.tracking.registry import register_version
    from slca.tracking.system import SystemSampler

    store, data = root / "mlflow", root / "tasks"
    with Tracker(store, experiment=experiment) as tracker:
        tracker.start(run_name=name)
        tracker.log_metrics({"reward/tool": 0.5}, step=1)
        tracker.log_histograms(1, {"tool": np.linspace(-1, 1, 50)})
        tracker.log_datasets([split_input(data, "train", "ab" * 32)])
        model = tracker.client.create_logged_model(
            tracker.experiment_id, name="model", source_run_id=tracker.run_id
        )
        tracker.client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
        register_version(tracker, f"models:/{model.model_id}")
        run_id = tracker.run_id
    model_dir = root / "model"
    model_dir.mkdir()
    (model_dir / RUN_FILE).write_text(json.dumps({"run_id": run_id, "experiment": experiment}))
    with SystemSampler(0.05) as sampler:
        time.sleep(0.2)
    report = root / "eval.json"
    report.write_text("{}")
    turn = {"text": "checking the weather", "calls": [{"name": "get_weather"}], "call_errors": []}
    line = {"set": "in_domain", "task_id": "weather-0001", "process": 1.0, "turns": [turn]}
    log_evaluation(
        store,
        experiment=experiment,
        metrics={"eval/in_domain/success_at_0.9": 1.0},
        reports=[report],
        run_id=run_id,
        datasets=[split_input(data, "test", "cd" * 32)],
        system=sampler.finish(),
        tables={"eval/eval.table.json": evaluation_table([line])},
        model_dir=model_dir,
    )
    return run_id


def publish_artifacts(root: Path, api_url: str, run_id: str) -> None:
    """The pipeline's three artifacts, made by its own functions in one flow run."""
    from prefect import flow

    from slca_pipeline.tasks import artifacts

    report = root / "report"
    report.mkdir()
    (report / "report.md").write_text(
        "# slca: experiment 'demo'\n\n| arm | Success@0.9 (%) |\n|---|---|\n| slca | 100.0 |\n"
    )
    (report / "summary.json").write_text(json.dumps({"slca": {"runs": [run_id], "seeds": 1}}))

    @flow
    def publishing():
        artifacts.publish_validation(VALIDATION, str(root / "tasks"), None)
        artifacts.publish_comparison(report / "report.md", str(root / "mlflow"))
        artifacts.publish_training_run("slca", run_id, str(root / "mlflow"))

    with prefect_api(api_url):
        assert publishing(return_state=True).is_completed()


@pytest.mark.long
def test_runs_datasets_metrics_models_and_artifacts_render(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store, shots = tmp_path / "mlflow", tmp_path / "shots"
    grpo = log_run(store, "demo", "grpo-run")
    slca = train_and_evaluate(tmp_path, "demo", "slca-run")
    other = log_run(store, "other", "elsewhere")

    rendered = {}  # url -> DOM, of each page the check renders

    def render(url, **options):
        rendered[url] = real_render(url, **options)
        return rendered[url]

    real_render = ui_check.render
    monkeypatch.setattr(ui_check, "render", render)

    with running_prefect_server(tmp_path / "prefect") as (port, _):
        publish_artifacts(tmp_path, f"http://127.0.0.1:{port}/api", slca)
        keys = ["slca-comparison", "slca-validation", "slca-train-slca"]
        prefect = ui_check.check_prefect(f"http://127.0.0.1:{port}", keys, shots)
    missing = ui_check.check(store, "demo", shots)

    table = "eval/eval.table.json"
    assert set(missing) == {
        "runs table",
        "runs table datasets",
        *(f"run {n} {what}" for n in ("grpo-run", "slca-run") for what in ("metrics", "histogram")),
        "run slca-run system metrics",  # grpo-run has none: not looked for
        f"run slca-run evaluation table {table}",
        "registered model demo-policy",
    }
    assert not any(missing.values()), missing
    assert set(prefect) == {"prefect artifacts", *(f"prefect artifact {k}" for k in keys)}
    assert not any(prefect.values()), prefect
    for name in (*ui_check.SCREENSHOTS, ui_check.PREFECT_SHOT):
        assert (shots / name).stat().st_size > 10_000, name

    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    demo = client.get_experiment_by_name("demo").experiment_id
    assert client.get_registered_model("demo-policy").aliases["champion"] in (1, "1")
    (runs,) = [d for u, d in rendered.items() if u.endswith(f"/{demo}/runs")]
    text = ui_check.text_of(runs)
    # what the checks look for is there because of the store, not on any page: another
    # experiment's run is not in this runs table, a run's data is in its own row only
    assert "grpo-run" in runs and other not in runs
    assert "tasks/train (" + "ab" * 18 + ")" in text and "tasks/test (" + "cd" * 18 + ")" in text
    assert text.count("tasks/train (") == 1
    ((url, system),) = [(u, d) for u, d in rendered.items() if u.endswith("/system-metrics")]
    logged = [k for k in client.get_run(slca).data.metrics if k.startswith("system/")]
    assert f"/runs/{slca}/" in url and f"System metrics ({len(logged)})" in ui_check.text_of(system)
    (evaluated,) = [d for u, d in rendered.items() if u.endswith(table)]
    assert "weather-0001" in evaluated and grpo not in evaluated
    (model,) = [d for u, d in rendered.items() if u.endswith("/#/models/demo-policy")]
    assert ">@&nbsp;champion<" in model
    pages = [ui_check.text_of(d) for u, d in rendered.items() if "/artifacts/artifact/" in u]
    assert any("expect_column_values_to_be_unique id pass 0 of 40 fail" in p for p in pages)
    histories = {u.rsplit("/", 1)[1]: d for u, d in rendered.items() if "/artifacts/key/" in u}
    assert set(histories) == set(keys)
    assert all(key in ui_check.text_of(page) for key, page in histories.items())


def test_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no MLflow store"):
        ui_check.MlflowUI(tmp_path)
