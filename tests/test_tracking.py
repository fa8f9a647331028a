"""slca.tracking against a real SQLite-backed MLflow store (no mocks).

One store per module (creating its tables takes seconds); each test uses its own
experiment, so runs never mix.
"""

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from slca.tracking import (
    COMPLETE_MARKER,
    MAX_PARAM_VALUE_LENGTH,
    NONFINITE_METRIC,
    Tracker,
    default_pip_requirements,
    flatten_config,
    metric_history,
    sqlite_uri,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("mlflow")


pytestmark = pytest.mark.usefixtures("no_ambient_mlflow")


@pytest.fixture
def experiment(request):
    return request.node.name.replace("[", "_").replace("]", "")


def local_artifacts(tracker_or_uri, run_id=None) -> Path:
    client = MlflowClient(tracking_uri=tracker_or_uri)
    uri = client.get_run(run_id).info.artifact_uri
    assert uri.startswith("file://")
    return Path(uri[len("file://") :])


def test_import_disables_telemetry_before_mlflow_starts():
    ci_markers = ("PYTEST_CURRENT_TEST", "CI", "GITHUB_ACTIONS", "DO_NOT_TRACK")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ci_markers and k != "MLFLOW_DISABLE_TELEMETRY"
    }
    code = (
        "import os, slca.tracking, mlflow.telemetry as t;"
        "print(os.environ['MLFLOW_DISABLE_TELEMETRY'], t.get_telemetry_client())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["true", "None"]


def test_the_package_loads_mlflow_only_for_a_name_that_needs_it():
    # a run with tracking off (it writes the run file) must not need MLflow
    code = (
        "import sys, slca.tracking as t; run_file = t.RUN_FILE;"
        "print('mlflow' in sys.modules, run_file);"
        "tracker = t.Tracker;"
        "print('mlflow' in sys.modules, tracker.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "mlflow_run.json", "True", "slca.tracking.writer"]
    with pytest.raises(AttributeError, match="no attribute 'Trackr'"):
        import slca.tracking

        slca.tracking.Trackr  # noqa: B018


def test_default_store_is_sqlite_with_artifacts_beside_it(store, experiment):
    with Tracker(store, experiment=experiment) as tracker:
        assert tracker.tracking_uri == f"sqlite:///{store.resolve()}/mlflow.db"
        assert tracker.tracking_uri == sqlite_uri(store)
        tracker.start(run_name="r")
        assert (store / "mlflow.db").is_file()
        artifacts = local_artifacts(tracker.tracking_uri, tracker.run_id)
        assert artifacts.is_relative_to(store.resolve() / "artifacts")
        run_id = tracker.run_id
    run = MlflowClient(tracking_uri=sqlite_uri(store)).get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "r"


def test_flatten_config_uses_dotted_keys_and_keeps_empty_sections():
    flat = flatten_config({"a": {"b": {"c": 1}, "d": [1, 2]}, "e": {}, "f": None})
    assert flat == {"a.b.c": 1, "a.d": [1, 2], "e": {}, "f": None}


def test_params_are_flattened_with_git_commit_data_hashes_and_full_config(store, experiment):
    long_prompt = "tool " * 2000  # 10,000 characters: over MLflow's 6,000 limit
    config = {
        "train": {"algorithm": {"estimator": "slca", "weights": {"tool": 1.0, "summary": 0.5}}},
        "model": {"path": Path("models/tiny"), "layers": [2, 4]},
        "prompt": long_prompt,
        "empty": {},
    }
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    with Tracker(store, experiment=experiment) as tracker:
        tracker.start()
        tracker.log_params(config, data_hashes={"tasks": "md5:abc123"}, git_dir=REPO)
        run_id = tracker.run_id
    run = MlflowClient(tracking_uri=sqlite_uri(store)).get_run(run_id)
    params = run.data.params
    assert params["train.algorithm.estimator"] == "slca"
    assert params["train.algorithm.weights.tool"] == "1.0"
    assert params["train.algorithm.weights.summary"] == "0.5"
    assert params["model.path"] == "models/tiny"
    assert params["model.layers"] == "[2, 4]"
    assert params["empty"] == "{}"
    assert len(params["prompt"]) == MAX_PARAM_VALUE_LENGTH
    assert params["prompt"].endswith("...[truncated]")
    assert long_prompt.startswith(params["prompt"].removesuffix("...[truncated]"))
    assert params["git.commit"] == head
    assert params["git.dirty"] in ("true", "false")
    assert params["data_hash.tasks"] == "md5:abc123"
    assert run.data.tags["data_hash.tasks"] == "md5:abc123"
    assert run.data.tags["mlflow.source.git.commit"] == head
    # The kernels slca pinned at import (AVX2 on any x86-64 CPU that has it).
    assert run.data.tags["slca.cpu_kernels"] == torch.backends.cpu.get_cpu_capability()
    saved = yaml.safe_load(
        (local_artifacts(sqlite_uri(store), run_id) / "config" / "resolved.yaml").read_text()
    )
    assert saved["prompt"] == long_prompt  # whole, where the param is truncated
    assert saved["model"] == {"path": "models/tiny", "layers": [2, 4]}
    assert saved["train"] == config["train"]


def test_git_commit_is_unknown_outside_a_checkout(store, experiment, tmp_path):
    with Tracker(store, experiment=experiment) as tracker:
        tracker.start()
        params = tracker.log_params({"a": 1}, git_dir=tmp_path)
        assert params["git.commit"] == "unknown"
        run = MlflowClient(tracking_uri=sqlite_uri(store)).get_run(tracker.run_id)
        assert run.data.params["git.commit"] == "unknown"


def test_metrics_read_back_exactly_and_non_finite_values_are_dropped(store, experiment):
    with Tracker(store, experiment=experiment) as tracker:
        tracker.start()
        for step in range(5):
            tracker.log_metrics(
                {
                    "reward/tool": 0.1 * step,
                    "actor/kl": np.float32(0.5) if step != 2 else float("nan"),
                    "actor/grad_norm": torch.tensor(float("inf") if step == 3 else step),
                    "perf/step_s": -float("inf") if step == 4 else 1.5,
                },
                step=step,
            )
        assert tracker.history("reward/tool") == [(s, 0.1 * s) for s in range(5)]
        assert tracker.history("actor/kl") == [(s, 0.5) for s in (0, 1, 3, 4)]
        assert tracker.history("actor/grad_norm") == [(s, float(s)) for s in (0, 1, 2, 4)]
        assert tracker.history("perf/step_s") == [(s, 1.5) for s in range(4)]
        assert tracker.history(NONFINITE_METRIC) == [(2, 1.0), (3, 1.0), (4, 1.0)]
        assert tracker.nonfinite_dropped == {"actor/kl": 1, "actor/grad_norm": 1, "perf/step_s": 1}
        # the same (key, step) again in the same process is skipped, a new key is not
        logged = tracker.log_metrics({"reward/tool": 9.0, "reward/sum": 0.25}, step=4)
        assert logged == {"reward/sum": 0.25}
        assert tracker.skipped["reward/tool"] == 1
        assert tracker.history("reward/tool")[-1] == (4, 0.4)
        with pytest.raises(TypeError, match="reward/tool"):
            tracker.log_metrics({"reward/tool": "high"}, step=5)
        with pytest.raises(ValueError, match="step"):
            tracker.log_metrics({"reward/tool": 1.0}, step=-1)
        run_id = tracker.run_id
    history = metric_history(run_id, "reward/sum", tracking_uri=sqlite_uri(store))
    assert history == [(4, 0.25)]


def run_steps(tracker, steps, scale):
    for step in steps:
        metrics = {"reward/total": scale * step}
        if step % 2 == 0:  # logged every other step, like a probe every K steps
            metrics["actor/grad_cosine"] = scale * step
        tracker.log_metrics(metrics, step=step)


class _TerminationSignal(BaseException):
    """As Prefect's, which a worker's SIGTERM raises in a cancelled flow run."""


@pytest.mark.parametrize(
    "stop, status",
    [(KeyboardInterrupt, "KILLED"), (_TerminationSignal, "KILLED"), (RuntimeError, "FAILED")],
)
def test_a_stop_from_outside_ends_the_run_killed_and_an_error_failed(
    store, experiment, stop, status
):
    with pytest.raises(stop):
        with Tracker(store, experiment=experiment) as tracker:
            tracker.start(run_name="stopped")
            run_id = tracker.run_id
            raise stop()
    run = MlflowClient(tracking_uri=sqlite_uri(store)).get_run(run_id)
    assert run.info.status == status and run.info.end_time is not None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_in_the_middle_of_a_store_read_ends_the_run_killed_at_once(
    store, experiment, signum
):
    """The signal lands after SQLite stepped a SELECT and before its rows were read: cut
    off there, the cursor stayed alive in the traceback, holding SQLite's shared lock, so
    ending the run KILLED waited 20 s for ``database is locked`` and left it RUNNING."""
    from sqlalchemy import event

    tracker = Tracker(store, experiment=experiment)
    engine = tracker.client._tracking_client.store.engine
    armed = []

    def stop_mid_read(conn, cursor, statement, *rest):
        if armed and statement.lstrip().upper().startswith("SELECT"):
            armed.clear()
            signal.raise_signal(signum)

    event.listen(engine, "after_cursor_execute", stop_mid_read)
    # both as Ctrl-C ends a run (a CI process started in the background ignores SIGINT)
    previous = signal.signal(signum, _raise_keyboard_interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            with tracker:
                tracker.start(run_name="stopped mid-read")
                run_id = tracker.run_id
                armed.append(True)
                tracker.client.get_run(run_id)
                pytest.fail("the read returned and the stop was not handled")
    finally:
        signal.signal(signum, previous)
        event.remove(engine, "after_cursor_execute", stop_mid_read)
    assert armed == []  # the signal was sent mid-read
    assert MlflowClient(tracking_uri=sqlite_uri(store)).get_run(run_id).info.status == "KILLED"


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _error_while_stopping():
    """What Prefect 3.7 raises when a SIGTERM lands while a task run is being created."""
    try:
        raise _TerminationSignal()
    except _TerminationSignal:
        raise ValueError("Task run is not set")  # noqa: B904 (raised as Prefect does)


def _error_after_a_handled_stop():
    try:
        raise _TerminationSignal()
    except _TerminationSignal:
        pass
    raise ValueError("a real error, later")


@pytest.mark.parametrize(
    "raise_it, status", [(_error_while_stopping, "KILLED"), (_error_after_a_handled_stop, "FAILED")]
)
def test_an_error_raised_while_a_stop_is_handled_still_ends_the_run_killed(
    store, experiment, raise_it, status
):
    with pytest.raises(ValueError):
        with Tracker(store, experiment=experiment) as tracker:
            tracker.start(run_name="stopped")
            run_id = tracker.run_id
            raise_it()
    assert MlflowClient(tracking_uri=sqlite_uri(store)).get_run(run_id).info.status == status


def test_resume_continues_the_same_run_and_logs_nothing_twice(store, experiment):
    config = {"train": {"steps": 8, "seed": 1}}
    with pytest.raises(RuntimeError, match="killed"):  # the first process dies at step 5
        with Tracker(store, experiment=experiment) as first:
            first.start(run_name="resumable")
            first.log_params(config, git_dir=REPO)
            run_steps(first, range(6), scale=1.0)
            run_id = first.run_id
            raise RuntimeError("killed")
    client = MlflowClient(tracking_uri=sqlite_uri(store))
    assert client.get_run(run_id).info.status == "FAILED"

    # the second process restarts from a checkpoint at step 3 and replays 4..5
    with Tracker(store, experiment=experiment) as second:
        second.start(run_name="ignored", resume_run_id=run_id)
        assert second.run_id == run_id
        assert second.last_steps == {"reward/total": 5, "actor/grad_cosine": 4}
        with warnings.catch_warnings(action="error"):
            second.log_params(config, git_dir=REPO)  # same config: nothing to change
        run_steps(second, range(4, 9), scale=10.0)
        assert second.skipped == {"reward/total": 2, "actor/grad_cosine": 1}

    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert [r.info.run_id for r in runs] == [run_id]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "resumable"
    assert run.data.tags["slca.resume_count"] == "1"
    total = metric_history(run_id, "reward/total", tracking_uri=sqlite_uri(store))
    assert total == [(s, float(s)) for s in range(6)] + [(s, 10.0 * s) for s in (6, 7, 8)]
    cosine = metric_history(run_id, "actor/grad_cosine", tracking_uri=sqlite_uri(store))
    assert cosine == [(0, 0.0), (2, 2.0), (4, 4.0), (6, 60.0), (8, 80.0)]


KILLED_WRITER = """
import os, signal, sys
from slca.tracking import Tracker
tracker = Tracker(sys.argv[1], experiment=sys.argv[2])
tracker.start(run_name="killed")
for step in range(5):
    tracker.log_metrics({"reward/total": float(step)}, step=step)
tracker.log_histograms(4, {"tool": [1.0, 2.0]})
print(tracker.run_id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_killed_with_sigkill_resumes_in_a_new_process(store, experiment):
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(store), experiment],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    run_id = killed.stdout.split()[0]
    client = MlflowClient(tracking_uri=sqlite_uri(store))
    assert client.get_run(run_id).info.status == "RUNNING"  # nobody ended it
    with Tracker(store, experiment=experiment) as tracker:
        tracker.start(resume_run_id=run_id)
        for step in range(2, 7):  # the last checkpoint was at step 1
            tracker.log_metrics({"reward/total": 10.0 * step}, step=step)
        assert tracker.log_histograms(4, {"tool": [0.0]}) is None
    history = metric_history(run_id, "reward/total", tracking_uri=sqlite_uri(store))
    assert history == [(s, float(s)) for s in range(5)] + [(5, 50.0), (6, 60.0)]
    assert client.get_run(run_id).info.status == "FINISHED"


def test_resume_with_a_changed_config_keeps_the_first_params_and_records_the_change(
    store, experiment
):
    with Tracker(store, experiment=experiment) as first:
        first.start()
        first.log_params({"train": {"steps": 8, "lr": 1e-5}})
        run_id = first.run_id
    with Tracker(store, experiment=experiment) as second:
        second.start(resume_run_id=run_id)
        with pytest.warns(UserWarning, match="train.steps"):
            second.log_params({"train": {"steps": 16, "lr": 1e-5}, "extra": "new"})
    run = MlflowClient(tracking_uri=sqlite_uri(store)).get_run(run_id)
    assert run.data.params["train.steps"] == "8"
    assert run.data.params["extra"] == "new"
    assert run.data.tags["slca.params_changed_on_resume"] == "train.steps"
    artifacts = local_artifacts(sqlite_uri(store), run_id) / "config"
    assert yaml.safe_load((artifacts / "resolved.yaml").read_text())["train"]["steps"] == 8
    assert yaml.safe_load((artifacts / "resolved.resume-1.yaml").read_text())["train"]["steps"] == (
        16
    )


def test_resume_refuses_an_unknown_run_or_one_of_another_experiment(store, experiment):
    with Tracker(store, experiment=experiment + "-other") as other:
        other.start()
        foreign = other.run_id
    with Tracker(store, experiment=experiment) as tracker:
        with pytest.raises(ValueError, match="not found"):
            tracker.start(resume_run_id="0123456789abcdef0123456789abcdef")
        with pytest.raises(ValueError, match="belongs to experiment"):
            tracker.start(resume_run_id=foreign)
        assert mlflow.active_run() is None


def test_histograms_write_a_figure_per_segment_and_raw_arrays_that_round_trip(store, experiment):
    rng = np.random.default_rng(0)
    tool = rng.normal(size=(4, 16)).astype(np.float32)
    tool[0, 0] = np.nan  # kept in the arrays, left out of the figure
    summary = torch.linspace(-1, 1, 33)
    with Tracker(store, experiment=experiment) as tracker:
        tracker.start()
        path = tracker.log_histograms(10, {"tool": tool, "summary": summary})
        assert path == "histograms/step_10"
        assert tracker.log_histograms(10, {"tool": tool}) is None  # already logged
        with pytest.raises(ValueError, match="segment name"):
            tracker.log_histograms(11, {"../tool": tool})
        run_id = tracker.run_id
    folder = local_artifacts(sqlite_uri(store), run_id) / "histograms" / "step_10"
    assert sorted(p.name for p in folder.iterdir()) == [
        COMPLETE_MARKER,
        "summary.png",
        "tool.png",
        "values.npz",
    ]
    for png in ("tool.png", "summary.png"):
        data = (folder / png).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
    with np.load(folder / "values.npz") as arrays:
        assert sorted(arrays.files) == ["summary", "tool"]
        np.testing.assert_array_equal(arrays["tool"], tool.reshape(-1).astype(np.float64))
        np.testing.assert_array_equal(arrays["summary"], summary.numpy().astype(np.float64))


def test_resume_uploads_again_an_artifact_folder_cut_short(store, experiment, tmp_path):
    with Tracker(store, experiment=experiment) as first:
        first.start()
        first.log_histograms(2, {"tool": np.ones(3)})
        run_id = first.run_id
        # a crash in the middle of uploading step 4: files present, no marker
        partial = tmp_path / "partial"
        partial.mkdir()
        (partial / "tool.png").write_bytes(b"half")
        first.client.log_artifacts(run_id, str(partial), "histograms/step_4")
    with Tracker(store, experiment=experiment) as second:
        second.start(resume_run_id=run_id)
        assert second.log_histograms(2, {"tool": np.zeros(3)}) is None
        assert second.log_histograms(4, {"tool": np.zeros(3)}) == "histograms/step_4"
    root = local_artifacts(sqlite_uri(store), run_id) / "histograms"
    with np.load(root / "step_2" / "values.npz") as arrays:
        np.testing.assert_array_equal(arrays["tool"], np.ones(3))  # not overwritten
    assert (root / "step_4" / COMPLETE_MARKER).is_file()
    assert (root / "step_4" / "tool.png").read_bytes().startswith(b"\x89PNG")


def test_checkpoints_are_uploaded_per_step(store, experiment, tmp_path):
    checkpoint = tmp_path / "step_3"
    (checkpoint / "optimizer").mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"\x00\x01weights")
    (checkpoint / "optimizer" / "state.pt").write_bytes(b"optimizer")
    single = tmp_path / "rng.json"
    single.write_text('{"seed": 1}')
    with Tracker(store, experiment=experiment) as tracker:
        tracker.start()
        assert tracker.log_checkpoint(checkpoint, step=3) == "checkpoints/step_3"
        assert tracker.log_checkpoint(checkpoint, step=3) is None
        assert tracker.log_checkpoint(single, step=4) == "checkpoints/step_4"
        with pytest.raises(FileNotFoundError, match="missing"):
            tracker.log_checkpoint(tmp_path / "missing", step=5)
        run_id = tracker.run_id
    root = local_artifacts(sqlite_uri(store), run_id) / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["step_3", "step_4"]
    assert (root / "step_3" / "model.safetensors").read_bytes() == b"\x00\x01weights"
    assert (root / "step_3" / "optimizer" / "state.pt").read_bytes() == b"optimizer"
    assert (root / "step_3" / COMPLETE_MARKER).is_file()
    assert (root / "step_4" / "rng.json").read_text() == '{"seed": 1}'


def test_log_model_logs_a_tiny_qwen2_with_explicit_requirements_that_loads_back(
    store, experiment, caplog
):
    from slca.training.tiny import tiny_model, train_tokenizer

    texts = ["What is the weather in Paris?", '<tool_call>{"name": "get_weather"}</tool_call>']
    tokenizer = train_tokenizer(texts * 20, vocab_size=300)
    model = tiny_model(tokenizer)
    with Tracker(store, experiment=experiment) as tracker:
        tracker.start()
        with caplog.at_level(logging.WARNING, logger="mlflow.transformers"):
            uri = tracker.log_model(model, tokenizer)
        # a local model is not looked up on the Hub for a card or a license
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert tracker.log_model(model, tokenizer) == uri  # once per run and name
        run_id = tracker.run_id
        experiment_id = tracker.experiment_id
    client = MlflowClient(tracking_uri=sqlite_uri(store))
    models = client.search_logged_models([experiment_id])
    assert [m.source_run_id for m in models] == [run_id]
    mlflow.set_tracking_uri(sqlite_uri(store))
    local = Path(mlflow.artifacts.download_artifacts(uri))
    assert (local / "model" / "model.safetensors").is_file()
    assert "logged by slca" in (local / "model_card.md").read_text()
    requirements = (local / "requirements.txt").read_text().split()
    assert requirements == default_pip_requirements()
    assert not any(r.startswith("torchvision") for r in requirements)
    assert f"torch=={torch.__version__.split('+')[0]}" in requirements
    loaded = mlflow.transformers.load_model(uri, return_type="components")
    assert loaded["tokenizer"].encode(texts[1]) == tokenizer.encode(texts[1])
    original = model.state_dict()
    for name, tensor in loaded["model"].state_dict().items():
        torch.testing.assert_close(tensor, original[name], rtol=0, atol=0)


def test_leaving_the_block_on_an_error_marks_the_run_failed(store, experiment):
    with pytest.raises(ZeroDivisionError):
        with Tracker(store, experiment=experiment) as tracker:
            tracker.start()
            run_id = tracker.run_id
            1 / 0  # noqa: B018
    assert MlflowClient(tracking_uri=sqlite_uri(store)).get_run(run_id).info.status == "FAILED"
    assert mlflow.active_run() is None
    with pytest.raises(RuntimeError, match="start"):
        tracker.log_metrics({"reward/tool": 1.0}, step=0)


def test_a_finished_tracker_leaves_the_next_one_its_own_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with Tracker(tmp_path / "first", experiment="e") as first:
        first.start()
        first.log_metrics({"m": 1.0}, step=1)
    second = Tracker(tmp_path / "second", experiment="e")
    assert second.tracking_uri == sqlite_uri(tmp_path / "second")
    assert "MLFLOW_TRACKING_URI" not in os.environ


def test_a_checkpoint_with_its_own_card_keeps_it(tmp_path, monkeypatch):
    from slca.tracking.models import model_card

    (tmp_path / "README.md").write_text("---\nlicense: apache-2.0\n---\n# SmolLM2\n")
    model = type("Model", (), {"name_or_path": str(tmp_path)})()
    assert model_card(model).data.license == "apache-2.0"
    model.name_or_path = str(tmp_path / "elsewhere")
    assert model_card(model).data.license is None
    model.name_or_path = ""  # built in memory: not the README of the working directory
    monkeypatch.chdir(tmp_path)
    assert model_card(model).data.license is None


def _split_file(directory: Path, split: str, n: int) -> Path:
    import pandas as pd

    directory.mkdir(parents=True, exist_ok=True)
    rows = [
        {"id": f"t{i}", "source": "synth", "domain": "weather", "split": split, "eval_only": False}
        for i in range(n)
    ]
    path = directory / f"{split}.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_the_data_a_run_read_is_a_dataset_input_with_the_runs_hash(store, experiment, tmp_path):
    from slca.tracking import read_inputs, split_input

    data = tmp_path / "tasks"
    _split_file(data, "train", 3)
    _split_file(data, "val", 2)
    digest = "ab" * 32  # a sha256 as the manifest records it: 64 hex digits
    with Tracker(store, experiment=experiment) as tracker:
        tracker.start()
        inputs = [split_input(data, "train", digest), split_input(data, "val")]
        tracker.log_datasets(inputs)
        tracker.log_datasets(inputs)  # again (a resume): MLflow keeps one of each
        run_id = tracker.run_id
    run = MlflowClient(sqlite_uri(store)).get_run(run_id)
    found = sorted(read_inputs(run.inputs), key=lambda d: d["name"])
    val_hash = hashlib.sha256((data / "val.parquet").read_bytes()).hexdigest()
    assert (
        found
        == [
            {
                "name": "tasks/train",
                "digest": digest[:36],  # MLflow's longest digest; the whole hash is a tag
                "source": str((data / "train.parquet").resolve()),
                "context": "training",
                "content_sha256": digest,
            },
            {
                "name": "tasks/val",
                "digest": val_hash[:36],  # no manifest: the file's own hash
                "source": str((data / "val.parquet").resolve()),
                "context": "validation",
                "content_sha256": val_hash,
            },
        ]
    )
    profiles = [json.loads(d.dataset.profile)["num_rows"] for d in run.inputs.dataset_inputs]
    assert sorted(profiles) == [2, 3]


def test_a_run_that_loses_the_dataset_insert_race_logs_its_input_again(
    store, experiment, tmp_path, monkeypatch
):
    """Two arms started together log the same dataset; MLflow's lookup-then-insert lets
    the later insert break the unique key (the credit lab's GRPO arm failed so on CI).
    The loser logs again and links the dataset the other inserted; any other error of
    the store is raised at once."""
    from mlflow.exceptions import MlflowException

    from slca.tracking import read_inputs, split_input

    data = tmp_path / "tasks"
    _split_file(data, "train", 3)
    inputs = [split_input(data, "train", "ab" * 32)]
    with Tracker(store, experiment=experiment) as first:
        first.start()
        first.log_datasets(inputs)  # the arm that won the insert
    race = MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.name")
    refused = MlflowException("INVALID_PARAMETER_VALUE: a bad dataset")
    with Tracker(store, experiment=experiment) as second:
        second.start()
        log_inputs, calls = second.client.log_inputs, []

        def once(error):
            def log(*args, **kwargs):
                calls.append(error)
                if len(calls) == 1:
                    raise error
                return log_inputs(*args, **kwargs)

            return log

        monkeypatch.setattr(second.client, "log_inputs", once(race))
        second.log_datasets(inputs)
        assert len(calls) == 2
        calls.clear()
        monkeypatch.setattr(second.client, "log_inputs", once(refused))
        with pytest.raises(MlflowException, match="a bad dataset"):
            second.log_datasets(inputs)
        assert len(calls) == 1
        run_id = second.run_id
    run = MlflowClient(sqlite_uri(store)).get_run(run_id)
    assert [d["name"] for d in read_inputs(run.inputs)] == ["tasks/train"]


def test_a_manifest_gives_the_digest_and_evaluation_adds_its_data_to_a_finished_run(
    store, experiment, tmp_path
):
    from slca.tracking import log_evaluation, read_inputs, split_input

    data = tmp_path / "tasks"
    _split_file(data, "test", 4)
    (data / "manifest.json").write_text(json.dumps({"content_sha256": {"test": "cd" * 32}}))
    with Tracker(store, experiment=experiment) as tracker:
        tracker.start()
        run_id = tracker.run_id
    samples = [
        {"system/cpu_utilization_percentage": 50.0},
        {"system/cpu_utilization_percentage": 60.0},
    ]
    log_evaluation(
        store,
        experiment=experiment,
        metrics={"eval/x": 1.0},
        reports=[],
        run_id=run_id,
        datasets=[split_input(data, "test")],
        system=samples,
    )
    client = MlflowClient(sqlite_uri(store))
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    ((found),) = read_inputs(run.inputs)
    assert (found["digest"], found["context"]) == (("cd" * 32)[:36], "test")
    history = client.get_metric_history(run_id, "system/cpu_utilization_percentage")
    assert [(m.step, m.value) for m in history] == [(0, 50.0), (1, 60.0)]


def test_system_metrics_are_sampled_at_the_configured_interval(store, experiment):
    import time

    from slca.tracking.system import SystemSampler

    with Tracker(store, experiment=experiment, system_metrics_s=0.2) as tracker:
        tracker.start()
        time.sleep(1.5)
        run_id = tracker.run_id
    client = MlflowClient(sqlite_uri(store))
    cpu = client.get_metric_history(run_id, "system/cpu_utilization_percentage")
    memory = client.get_metric_history(run_id, "system/system_memory_usage_megabytes")
    assert len(cpu) >= 2 and len(memory) >= 2
    assert sorted(m.step for m in cpu) == list(range(len(cpu)))
    # off: no thread, no metric
    with Tracker(store, experiment=experiment) as tracker:
        tracker.start()
        quiet = tracker.run_id
    assert not [k for k in client.get_run(quiet).data.metrics if k.startswith("system/")]
    with SystemSampler(0.1) as sampler:
        time.sleep(0.35)
    assert len(sampler.samples) >= 3
    assert all(0 <= s["system/cpu_utilization_percentage"] <= 100 for s in sampler.samples)
    assert SystemSampler(None).__enter__().finish() == []


def test_an_evaluation_of_a_model_trained_against_another_store_gets_a_run_of_its_own(
    store, experiment, tmp_path, caplog
):
    """A model's run file names a run of another store (a copied model, or an
    evaluation with another tracking_dir): the figures go into a new run here, with a
    warning naming the missing run, not a failure after the evaluation has run."""
    from slca.tracking import log_evaluation

    other = tmp_path / "other-store"
    with Tracker(other, experiment=experiment) as tracker:
        tracker.start()
        foreign = tracker.run_id
    with caplog.at_level("WARNING", logger="slca.tracking.evaluation"):
        run_id = log_evaluation(
            store,
            experiment=experiment,
            metrics={"eval/x": 0.5},
            reports=[],
            run_id=foreign,
            run_name="eval-copied",
        )
    assert run_id != foreign
    run = MlflowClient(sqlite_uri(store)).get_run(run_id)
    assert (run.info.run_name, run.data.metrics["eval/x"]) == ("eval-copied", 0.5)
    assert foreign in caplog.text and "eval-copied" in caplog.text
    # the other store's run is left as it was
    assert "eval/x" not in MlflowClient(sqlite_uri(other)).get_run(foreign).data.metrics
