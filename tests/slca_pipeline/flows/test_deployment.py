"""prefect.yaml against a real Prefect server: pool, deploy, worker, run, Completed.

Starts `prefect server start` on 127.0.0.1 (a free port), creates the `cpu` process
pool, deploys `data/cpu` from prefect.yaml, starts a worker, runs the deployment on the
tiny configuration with `prefect deployment run … --watch`, and stops every process it
started by PID (the process worker exits on a second SIGINT).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import running_prefect_server, stop_session

REPO = Path(__file__).resolve().parents[3]
PREFECT = [sys.executable, "-m", "prefect"]

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path):
    env = dict(
        os.environ,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_UI_ENABLED="false",
        PREFECT_WORKER_QUERY_SECONDS="2",
        PREFECT_LOGGING_LEVEL="INFO",
        PWD=str(REPO),  # prefect.yaml's pull step: the checkout the worker runs from
    )
    command = [*PREFECT, "server", "start", "--host", "127.0.0.1"]
    with running_prefect_server(tmp_path / "prefect-home", command, env) as (_, server_env):
        yield server_env


def prefect(env, *args, timeout=120) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [*PREFECT, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def test_deploy_from_prefect_yaml_and_run_on_a_process_worker(server, tmp_path, write_tiny_params):
    env = server
    params = write_tiny_params(tmp_path)
    prefect(env, "work-pool", "create", "cpu", "--type", "process")
    prefect(env, "--no-prompt", "deploy", "--prefect-file", "prefect.yaml", "--name", "data/cpu")
    worker_log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen(
        [*PREFECT, "worker", "start", "--pool", "cpu", "--limit", "1"],
        cwd=tmp_path,  # the pull step, not the worker's directory, decides where flows run
        env=env,
        stdout=worker_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        run = prefect(
            env,
            "deployment",
            "run",
            "data/cpu",
            "--params",
            json.dumps({"params_file": str(params), "state_dir": str(tmp_path / "state")}),
            "--watch",
            "--watch-timeout",
            "240",
            timeout=300,
        )
    finally:
        stop_session(worker, interrupts=2, wait_s=10)
        worker_log.close()
    assert "Completed" in run.stdout, run.stdout
    manifest = json.loads((tmp_path / "data/tasks/manifest.json").read_text())
    assert manifest["totals"]["train"] > 0 and manifest["sources"] == ["synth"]
    assert (tmp_path / "data/val").is_dir()
    assert "database is locked" not in (tmp_path / "worker.log").read_text()


def test_every_deployment_points_at_a_flow_its_parameters_fit():
    import importlib

    document = yaml.safe_load((REPO / "prefect.yaml").read_text())
    seen = set()
    for deployment in document["deployments"]:
        path, name = deployment["entrypoint"].split(":")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        flow = getattr(module, name)
        flow.validate_parameters(deployment.get("parameters") or {})  # raises on a misfit
        assert deployment["work_pool"]["name"] in ("cpu", "gpu")
        seen.add((flow.name, deployment["work_pool"]["name"]))
    flows = {"data", "simulator_check", "sft", "train", "evaluate", "pipeline"}
    assert seen == {(f, pool) for f in flows for pool in ("cpu", "gpu")}
    evaluate = importlib.import_module("slca_pipeline.flows.evaluate").evaluate
    with pytest.raises(Exception, match="models"):  # the check can fail
        evaluate.validate_parameters({"models": {}})
