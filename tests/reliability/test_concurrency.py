"""Issue 16, fault 3: two runs at once. One writer per checkpoint directory and per
MLflow store: the second is refused at once, naming the holder's PID, and the first
finishes untouched; starting on a new store at once never breaks it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from slca.locks import LockHeld
from slca.training.checkpoints import complete_checkpoints, read_client_state
from slca.training.identity import read_identity
from slca.training.session import run_train

mlflow = pytest.importorskip("mlflow")
pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.stderr.read()[-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_a_second_run_is_refused_at_once_naming_the_first(settings, config, tmp_path):
    first = settings(steps=4, checkpoint_every=1)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"train": first}))
    command = [sys.executable, "-m", "slca.training.stages", "train", "--params", str(params)]
    holder = subprocess.Popen(
        command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    ckpt = tmp_path / "ckpt/slca"
    _wait_for(tmp_path / "mlflow/.slca-writer.lock.owner", holder)  # it holds every lock
    # the same checkpoint directory (and store): refused, naming the holder
    with pytest.raises(LockHeld, match=rf"train.checkpoint_dir .* in use by PID {holder.pid}\b"):
        run_train(config(steps=4, checkpoint_every=1))
    # another checkpoint and output directory, the same MLflow store: refused too
    elsewhere = {"checkpoint_dir": str(tmp_path / "ck2"), "out_dir": str(tmp_path / "out2")}
    with pytest.raises(LockHeld, match=rf"MLflow store .* in use by PID {holder.pid}\b"):
        run_train(config(estimator="grpo", **elsewhere))
    assert holder.poll() is None, "the first run ended before the second was tried"
    out, err = holder.communicate(timeout=900)
    assert holder.returncode == 0, err[-3000:]
    run_id = out.strip().splitlines()[-1]
    # every checkpoint in the directory is the first run's, steps 1..4, none lost
    done = complete_checkpoints(ckpt)
    assert [p.name for p in done] == [f"step_{k:06d}" for k in range(1, 5)]
    assert {read_client_state(p)["run_id"] for p in done} == {run_id}
    assert read_identity(ckpt).run_id == run_id
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow/mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "slca"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == run_id and run.info.status == "FINISHED"


def test_processes_starting_on_a_new_store_at_once_leave_it_usable(tmp_path):
    """MLflow creates (migrates) a SQLite store on first use; unguarded, two processes
    doing it at once died in the migration and left the store broken."""
    store = tmp_path / "mlflow"
    go = tmp_path / "go"  # created once every process has imported MLflow: all start at once
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from slca.tracking import Tracker, experiment_runs
        print("ready", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.005)
        if sys.argv[1] == "reader":
            experiment_runs({str(store)!r}, experiment="slca")
        else:
            try:
                with Tracker({str(store)!r}, experiment="slca") as tracker:
                    tracker.start(run_name=sys.argv[1])
                    tracker.log_metrics({{"x": 1.0}}, step=1)
                    time.sleep(3)
            except ValueError as exc:  # the store's writer lock: another process has it
                assert "in use by PID" in str(exc), exc
                sys.exit(3)
        """
    )
    roles = ["reader", "writer-a", "writer-b", "reader"]
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, role],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in roles
    ]
    for process in processes:
        assert process.stdout.readline() == "ready\n", process.communicate(timeout=60)[1][-3000:]
    go.touch()
    codes = []
    for process in processes:
        _out, err = process.communicate(timeout=600)
        assert process.returncode in (0, 3), err[-3000:]
        codes.append(process.returncode)
    # a writer ran; the other was refused at once (or, started late, ran after it)
    assert 0 in codes[1:3]
    client = mlflow.tracking.MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "slca"]
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == codes[1:3].count(0)
    assert all(run.data.metrics == {"x": 1.0} for run in runs)
