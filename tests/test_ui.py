"""The MLflow UI in headless Chromium shows the runs, their metrics and histograms.

The store is written by the trainer's own :class:`slca.tracking.Tracker`; the check is
tools/ui_check.py, the same one `make ui-check` runs on the demo's store.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ui_check  # noqa: E402

from slca.tracking import Tracker  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        ui_check.chromium() is None, reason="chromium missing: `make chromium` installs it"
    ),
]


def log_run(directory, experiment, name):
    with Tracker(directory, experiment=experiment) as tracker:
        tracker.start(run_name=name)
        for step in (1, 2):
            tracker.log_metrics({"reward/tool": 0.1 * step, "adv/tool_std": 1.0}, step=step)
        tracker.log_histograms(2, {"tool": np.linspace(-1, 1, 50), "summary": np.zeros(5)})
        return tracker.run_id


@pytest.mark.long
def test_runs_metrics_and_histograms_render(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store = tmp_path / "mlflow"
    for name in ("grpo-run", "slca-run"):
        log_run(store, "demo", name)
    other = log_run(store, "other", "elsewhere")

    missing = ui_check.check(store, "demo", tmp_path / "shots")

    assert set(missing) == {
        "runs table",
        *(f"run {n} {what}" for n in ("grpo-run", "slca-run") for what in ("metrics", "histogram")),
    }
    assert not any(missing.values()), missing
    assert (tmp_path / "shots/mlflow-ui-runs.png").stat().st_size > 10_000
    assert (tmp_path / "shots/mlflow-ui-histogram.png").stat().st_size > 10_000
    # the check can fail: another experiment's run is not in this runs table
    from mlflow.tracking import MlflowClient

    demo = MlflowClient(f"sqlite:///{store / 'mlflow.db'}").get_experiment_by_name("demo")
    with ui_check.MlflowUI(store) as ui:
        dom = ui_check.render(f"{ui.url}/#/experiments/{demo.experiment_id}/runs")
    assert "grpo-run" in dom and other not in dom


def test_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no MLflow store"):
        ui_check.MlflowUI(tmp_path)
