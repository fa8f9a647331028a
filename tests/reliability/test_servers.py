"""Issue 16, fault 11: servers die with their owner.

``slca ui`` (MLflow with its uvicorn and job workers, a Prefect server) and the
ephemeral Prefect server of a flow command stop with the command on SIGTERM, and exit
by themselves after a kill -9 of it. Every descendant is collected from /proc while
they run and must be gone afterwards.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers import tiny_params

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]
SLCA = str(Path(sys.executable).parent / "slca")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.add(pid)
        except OSError:
            pass
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def env(tmp_path: Path) -> dict[str, str]:
    out = dict(os.environ, PREFECT_HOME=str(tmp_path / "prefect"), PYTHONUNBUFFERED="1")
    out.pop("PREFECT_API_URL", None)
    out.pop("MLFLOW_TRACKING_URI", None)
    return out


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_slca_ui_servers_and_workers_stop_with_it(tmp_path, signum):
    mlflow_port, prefect_port = free_port(), free_port()
    ui = subprocess.Popen(
        [SLCA, "ui", "--tracking-dir", str(tmp_path / "mlflow")]
        + ["--mlflow-port", str(mlflow_port), "--prefect-port", str(prefect_port)],
        env=env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: (
                answers(f"http://127.0.0.1:{mlflow_port}/")
                and answers(f"http://127.0.0.1:{prefect_port}/api/health")
            ),
            timeout=300,
            what="the servers never answered",
        )
        # issue 36: both answer a foreign Host (DNS rebinding) with a 4xx, changing nothing
        from helpers import http_request

        evil = {"host": "evil.example", "body": '{"name": "probe", "value": "x"}'}
        assert http_request(prefect_port, "POST", "/api/variables/", **evil)[0] == 400
        create = "/api/2.0/mlflow/experiments/create"
        assert http_request(mlflow_port, "POST", create, **evil)[0] == 403
        tree = descendants(ui.pid)
        assert len(tree) >= 4  # two supervisors, two servers, and their workers
        os.kill(ui.pid, signum)
        ui.wait(timeout=120)
        wait_until(lambda: not alive(tree), timeout=60, what=f"left running: {alive(tree)}")
        assert not answers(f"http://127.0.0.1:{mlflow_port}/")
        assert not answers(f"http://127.0.0.1:{prefect_port}/api/health")
    finally:
        if ui.poll() is None:
            ui.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_flow_commands_ephemeral_prefect_server_stops_with_it(tmp_path, signum):
    params = tiny_params(tmp_path)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({k: params[k] for k in ("prepare", "validate")}))
    command = subprocess.Popen(
        [SLCA, "data", "--params", str(path)],
        env=env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def server_started() -> bool:
            assert command.poll() is None, "the command ended before its server was seen"
            return any("uvicorn" in cmdline(pid) for pid in alive(descendants(command.pid)))

        wait_until(server_started, timeout=300, what="no ephemeral server started")
        tree = descendants(command.pid)
        os.kill(command.pid, signum)
        command.wait(timeout=120)
        wait_until(lambda: not alive(tree), timeout=60, what=f"left running: {alive(tree)}")
    finally:
        if command.poll() is None:
            command.kill()


EPHEMERAL = """
import sys
from prefect.server.api.server import SubprocessASGIServer
from slca_pipeline.cli import prefect_server

with prefect_server():  # what every flow command of `slca` runs its flows in
    server = SubprocessASGIServer()
    server.start()
    print(server.port, flush=True)
    sys.stdin.readline()
"""


def test_a_flow_commands_ephemeral_prefect_server_answers_loopback_host_names_only(tmp_path):
    """Issue 36: Prefect's ephemeral server listens on a 127.0.0.1 socket (not in
    process), so a page rebound to 127.0.0.1 could drive it; ``slca`` runs it behind the
    same host check as ``slca ui``'s server."""
    from helpers import http_request

    server = subprocess.Popen(
        [sys.executable, "-c", EPHEMERAL],
        env=dict(env(tmp_path), PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(server.stdout.readline())
        variable = '{"name": "probe", "value": "x"}'
        for host in ("evil.example", f"evil.example:{port}"):
            status, _, body = http_request(port, "POST", "/api/variables/", host, variable)
            assert (status, body) == (400, "Invalid host header")
        for host in ("127.0.0.1", f"localhost:{port}"):
            assert http_request(port, "GET", "/api/health", host)[0] == 200
        assert http_request(port, "GET", "/api/variables/name/probe")[0] == 404
        status, _, body = http_request(port, "POST", "/api/variables/", body=variable)
        assert status == 403 and "CSRF" in body  # a loopback request without a token
    finally:
        server.stdin.close()
        server.wait(timeout=60)
