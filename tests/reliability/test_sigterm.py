"""Issue 36, one signal policy: SIGTERM on the stage command (what DVC runs) and a
Prefect cancellation of the ``train`` flow (the worker's SIGTERM to the flow-run
process) each end the run KILLED with an end time, release the locks and
their owner files, and leave the last checkpoint resumable: three stops in a row, then
a resume that finishes, with one MLflow run, FINISHED, holding every step once.

The tiny settings of the issue's reproductions: 6 steps of 2 tasks x 2 samples, 32 new
tokens, a checkpoint every step. Each stop comes after a checkpoint newer than the ones
the attempt started with, so every attempt trains at least one step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import prefect_api, running_prefect_server, stop_session, tiny_params

from slca.training.checkpoints import latest_checkpoint

mlflow = pytest.importorskip("mlflow")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals"),
]

REPO = Path(__file__).resolve().parents[2]
PREFECT = [sys.executable, "-m", "prefect"]
CYCLES = 3
STEPS = 6


def tiny_train(settings, root: Path) -> dict:
    """The issue's tiny ``train`` section, checkpoints and output under ``root``."""
    train = settings(steps=STEPS, checkpoint_every=1)
    train["rollout"] = {**train["rollout"], "tasks_per_step": 2, "group_size": 2}
    train["rollout"]["max_new_tokens"] = 32
    return {**train, "checkpoint_dir": str(root / "ckpt"), "out_dir": str(root / "rl")}


def step_of(checkpoint_dir: Path) -> int:
    latest = latest_checkpoint(checkpoint_dir)
    return int(latest.name.split("_")[1]) if latest is not None else 0


def wait_for_a_new_checkpoint(checkpoint_dir: Path, since: int, alive, timeout=300) -> int:
    """Wait until a checkpoint newer than step ``since`` is complete; its step."""
    deadline = time.monotonic() + timeout
    while step_of(checkpoint_dir) <= since:
        assert alive(), "the run ended before it saved a new checkpoint"
        assert time.monotonic() < deadline, f"no checkpoint after step {since} in {timeout} s"
        time.sleep(0.2)
    return step_of(checkpoint_dir)


def the_run(tracking_dir: Path):
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tracking_dir / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "slca"]
    (run,) = client.search_runs([experiment.experiment_id])  # one run, resumed each time
    return client, run


def assert_stopped_and_resumable(root: Path, checkpoint_dir: Path, stopped_at: int) -> None:
    _, run = the_run(root / "mlflow")
    # KILLED: stopped from outside (KeyboardInterrupt under end_like_ctrl_c on the stage,
    # Prefect's TerminationSignal in a flow run), not an error (FAILED)
    assert run.info.status == "KILLED", run.info.status
    assert run.info.end_time is not None
    assert not list(root.rglob("*.owner")), list(root.rglob("*.owner"))
    assert stopped_at <= step_of(checkpoint_dir) < STEPS


def assert_one_finished_run(root: Path) -> None:
    client, run = the_run(root / "mlflow")
    assert run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "reward/tool")]
    assert steps == list(range(1, STEPS + 1))  # every step once, across four attempts
    assert not list(root.rglob("*.owner"))


def clean_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    env.pop("MLFLOW_TRACKING_URI", None)  # mlflow exports the last store this process used
    env.pop("PREFECT_API_URL", None)
    return env


def test_three_sigterms_on_the_stage_command_then_a_resume_finish_one_run(settings, tmp_path):
    ckpt = tmp_path / "ckpt"
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"train": tiny_train(settings, tmp_path)}))
    command = [sys.executable, "-m", "slca.training.stages", "train", "--params", str(params)]
    env = clean_env()
    for cycle in range(CYCLES):
        since = step_of(ckpt)
        job = subprocess.Popen(
            command + (["--resume"] if cycle else []),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            stopped_at = wait_for_a_new_checkpoint(ckpt, since, lambda j=job: j.poll() is None)
            os.kill(job.pid, signal.SIGTERM)  # `kill -TERM <pid>`, as the repro
            assert job.wait(timeout=120) != 0
        finally:
            stop_session(job)
        assert_stopped_and_resumable(tmp_path, ckpt, stopped_at)
    done = subprocess.run(
        [*command, "--resume"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert_one_finished_run(tmp_path)


def test_three_prefect_cancellations_of_the_train_flow_then_a_rerun_finish_one_run(
    workspace, settings, tmp_path
):
    """The deployment ``train/cpu`` of prefect.yaml on a process worker against the
    server ``slca ui`` starts; each run is cancelled as ``prefect flow-run cancel`` does
    (state Cancelling), which the worker turns into SIGTERM to the flow-run process."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.responses import SetStateStatus
    from prefect.states import Cancelling

    ckpt = tmp_path / "ckpt"
    document = tiny_params(workspace)
    document = {
        "validate": {**document["validate"], "report_dir": str(tmp_path / "val")},
        "train": tiny_train(settings, tmp_path),
    }
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(document))
    parameters = {"params_file": str(params), "state_dir": str(tmp_path / "state")}
    env = clean_env(
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_UI_ENABLED="false",
        PREFECT_WORKER_QUERY_SECONDS="2",
        PWD=str(REPO),  # prefect.yaml's pull step: the checkout the worker runs from
    )
    with running_prefect_server(tmp_path / "prefect-home", env=env) as (port, env):

        def prefect(*args: str) -> None:
            done = subprocess.run(
                [*PREFECT, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=180
            )
            assert done.returncode == 0, f"prefect {args}:\n{done.stdout}\n{done.stderr}"

        prefect("work-pool", "create", "cpu", "--type", "process")
        prefect("--no-prompt", "deploy", "--prefect-file", "prefect.yaml", "--name", "train/cpu")
        worker_log = open(tmp_path / "worker.log", "w")
        worker = subprocess.Popen(
            [*PREFECT, "worker", "start", "--pool", "cpu", "--limit", "1"],
            cwd=tmp_path,
            env=env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            with prefect_api(env["PREFECT_API_URL"]):
                with get_client(sync_client=True) as client:
                    deployment = client.read_deployment_by_name("train/cpu")

                    def final_state(run_id, timeout=600):
                        deadline = time.monotonic() + timeout
                        while True:
                            state = client.read_flow_run(run_id).state
                            if state is not None and state.is_final():
                                return state
                            assert time.monotonic() < deadline, f"flow run still {state}"
                            time.sleep(1)

                    def running(run_id):
                        return lambda: not client.read_flow_run(run_id).state.is_final()

                    for _ in range(CYCLES):
                        since = step_of(ckpt)
                        run = client.create_flow_run_from_deployment(
                            deployment.id, parameters=parameters
                        )
                        stopped_at = wait_for_a_new_checkpoint(ckpt, since, running(run.id))
                        result = client.set_flow_run_state(run.id, Cancelling())
                        assert result.status == SetStateStatus.ACCEPT, result.details
                        assert final_state(run.id).name == "Cancelled"
                        assert_stopped_and_resumable(tmp_path, ckpt, stopped_at)
                    run = client.create_flow_run_from_deployment(
                        deployment.id, parameters=parameters
                    )
                    state = final_state(run.id)
                    assert state.name == "Completed", state
        finally:
            # every run is final: the worker did not exit within 10 s of a first SIGINT
            # (Prefect's CLI forwards it), the second makes the CLI SIGKILL it at once
            stop_session(worker, interrupts=2, wait_s=3)
            worker_log.close()
    assert_one_finished_run(tmp_path)
