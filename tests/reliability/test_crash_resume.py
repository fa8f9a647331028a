"""Issue 16, crash safety: kill -9 at random points of training, a third of them in the
middle of a checkpoint upload, each followed by ``--resume``.

After every kill, no MLflow checkpoint folder marked complete lacks a file; at the end
the experiment holds one run, FINISHED, with every step of every metric exactly once,
every checkpoint uploaded and marked, and the latest local checkpoint complete.

CI runs ``SLCA_KILL_CYCLES`` cycles (default 3); the recorded 20-cycle run is::

    SLCA_KILL_CYCLES=20 .venv/bin/python -m pytest -q -s tests/reliability/test_crash_resume.py

A third of the kills land in the middle of a checkpoint upload, a third a random 0-6 s
into training (after its first upload), a third a random 1-40 s after launch.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from slca.tracking import COMPLETE_MARKER, logged_checkpoints
from slca.training.checkpoints import complete_checkpoints, latest_checkpoint

mlflow = pytest.importorskip("mlflow")
pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("train_driver.py")
CYCLES = int(os.environ.get("SLCA_KILL_CYCLES", "3"))
STEPS = int(os.environ.get("SLCA_KILL_STEPS", "5"))
METRICS = ("reward/tool", "reward/sum", "actor/pg_loss", "perf/step_s", "sim/invalid_rate")


class Run:
    """One training process; its stdout lines arrive on a queue."""

    def __init__(self, params: Path, env: dict[str, str]):
        command = [sys.executable, str(DRIVER), "train", "--params", str(params), "--resume"]
        self.process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def wait_for(self, prefix: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if self.lines.get(timeout=0.2).startswith(prefix):
                    return True
            except queue.Empty:
                continue
        return False

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def marked_folders_are_whole(artifacts: Path, checkpoint_dir: Path) -> list[str]:
    """Every ``checkpoints/step_k`` folder with the marker holds what the local checkpoint
    holds (names and sizes); returns the ones that do not."""
    bad = []
    for folder in sorted((artifacts / "checkpoints").glob("step_*")):
        if not (folder / COMPLETE_MARKER).exists():
            continue
        local = checkpoint_dir / f"step_{int(folder.name.split('_')[1]):06d}"
        want = {p.name: p.stat().st_size for p in local.iterdir()}
        have = {p.name: p.stat().st_size for p in folder.iterdir() if p.name != COMPLETE_MARKER}
        if have != want:
            bad.append(folder.name)
    return bad


@pytest.mark.long
def test_repeated_kill_minus_nine_and_resume_lose_and_duplicate_nothing(settings, tmp_path):
    config = settings(steps=STEPS, checkpoint_every=1, histogram_every=1)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"train": config}))
    env = dict(os.environ, PYTHONUNBUFFERED="1", SLOW_UPLOAD_S="0.15")
    env.pop("MLFLOW_TRACKING_URI", None)
    checkpoint_dir = tmp_path / "ckpt/slca"
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow/mlflow.db'}")
    rng = random.Random(16)
    kills = {"upload": 0, "training": 0, "anywhere": 0}
    for cycle in range(CYCLES):
        run = Run(params, env)
        mode = ("upload", "training", "anywhere")[cycle % 3]
        if mode == "upload":  # in the middle of a checkpoint upload
            if run.wait_for("UPLOAD checkpoints/", timeout=600):
                time.sleep(rng.uniform(0.0, 1.0))
        elif mode == "training":  # once steps run: rollout, update, logging, checkpoint
            if run.wait_for("UPLOAD", timeout=600):
                time.sleep(rng.uniform(0.0, 6.0))
        else:  # anywhere, start-up included
            deadline = time.monotonic() + rng.uniform(1.0, 40.0)
            while time.monotonic() < deadline and run.process.poll() is None:
                time.sleep(0.1)
        kills[mode] += run.process.poll() is None
        run.kill()
        if run.process.returncode == 0:
            break  # it finished before the kill: nothing left to resume
        assert run.process.returncode == -signal.SIGKILL, run.process.returncode
        runs = client.search_runs(
            [e.experiment_id for e in client.search_experiments() if e.name == "slca"]
        )
        for found in runs:
            artifacts = Path(found.info.artifact_uri.removeprefix("file://"))
            assert marked_folders_are_whole(artifacts, checkpoint_dir) == [], cycle
    final = Run(params, env)
    assert final.process.wait(timeout=900) == 0
    (experiment,) = [e for e in client.search_experiments() if e.name == "slca"]
    (run,) = client.search_runs([experiment.experiment_id])  # one run, whatever the kills
    assert run.info.status == "FINISHED"
    run_id = run.info.run_id
    for key in METRICS:
        steps = [m.step for m in client.get_metric_history(run_id, key)]
        assert steps == list(range(1, STEPS + 1)), (key, steps)  # none lost, none twice
    assert latest_checkpoint(checkpoint_dir).name == f"step_{STEPS:06d}"
    assert [p.name for p in complete_checkpoints(checkpoint_dir)] == [
        f"step_{k:06d}" for k in range(1, STEPS + 1)
    ]
    assert list(logged_checkpoints(run_id, tracking_uri=client.tracking_uri)) == list(
        range(1, STEPS + 1)
    )
    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    assert marked_folders_are_whole(artifacts, checkpoint_dir) == []
    assert not list((artifacts / "checkpoints").rglob(".artifact.uploading.*"))
    print(f"kill -9 cycles: {kills} (of {CYCLES}); steps {STEPS}; one run, each step once")
