"""Issue 36, item 5: the Prefect server of ``slca ui`` checks its Host.

One real server (``python -m slca_pipeline.server``, what ``slca ui`` starts) on a free
port: a request naming a foreign host (DNS rebinding) is refused and changes nothing, the
loopback names are served with or without the port, CSRF protection is on and CORS
admits the server's own origins only, and an ``slca`` flow command runs against it
through Prefect's client (which fetches the CSRF token itself).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import http_request as request
from helpers import prefect_api, running_prefect_server, tiny_params

from slca_pipeline.server import allowed_hosts, server_environment

pytestmark = pytest.mark.slow
SLCA = str(Path(sys.executable).parent / "slca")
EVIL = "evil.example"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The server's port and environment; stopped (its session, by PID) afterwards."""
    with running_prefect_server(tmp_path_factory.mktemp("prefect-home")) as (port, env):
        yield port, env


def test_the_loopback_names_and_a_specific_bind_address_are_the_allowed_hosts():
    assert allowed_hosts("127.0.0.1") == allowed_hosts("0.0.0.0") == allowed_hosts("::1")
    assert allowed_hosts("127.0.0.1") == ["127.0.0.1", "localhost", "[::1]"]
    assert allowed_hosts("10.0.0.5")[-1] == "10.0.0.5"
    assert allowed_hosts("fd00::5")[-1] == "[fd00::5]"
    assert server_environment("0.0.0.0", 4300)["PREFECT_UI_API_URL"] == (
        "http://127.0.0.1:4300/api"
    )


def test_a_foreign_host_is_refused_and_creates_nothing(server):
    port, _ = server
    variable = json.dumps({"name": "probe", "value": "x"})
    for host in (EVIL, f"{EVIL}:{port}"):
        status, _, body = request(port, "POST", "/api/variables/", host=host, body=variable)
        assert (status, body) == (400, "Invalid host header")
        assert request(port, "GET", "/api/health", host=host)[0] == 400
    # the websocket events endpoint too (Prefect's clients emit events there)
    upgrade = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    assert request(port, "GET", "/api/events/in", host=EVIL, **upgrade)[0] == 400
    assert request(port, "GET", "/api/variables/name/probe")[0] == 404  # nothing created


def test_the_loopback_names_are_served_with_or_without_the_port(server):
    port, _ = server
    for name in ("127.0.0.1", "localhost", "[::1]", "LOCALHOST"):
        for host in (name, f"{name}:{port}"):
            assert request(port, "GET", "/api/health", host=host)[:3:2] == (200, "true"), host


def test_csrf_protection_is_on_and_cors_admits_only_the_servers_origins(server):
    port, _ = server
    variable = json.dumps({"name": "probe", "value": "x"})
    status, _, body = request(port, "POST", "/api/variables/", body=variable)
    assert status == 403 and "CSRF" in body  # a loopback request without a token
    settings = json.loads(request(port, "GET", "/ui-settings")[2])
    assert settings["csrf_enabled"] is True
    assert settings["api_url"] == f"http://127.0.0.1:{port}/api"  # the UI calls this port
    preflight = {"Access-Control-Request-Method": "POST"}
    for origin in (f"http://localhost:{port}", f"http://127.0.0.1:{port}"):
        _, headers, _ = request(port, "OPTIONS", "/api/variables/", Origin=origin, **preflight)
        assert headers.get("access-control-allow-origin") == origin
    for origin in (f"http://{EVIL}", f"http://{EVIL}:{port}"):
        status, headers, _ = request(port, "OPTIONS", "/api/variables/", Origin=origin, **preflight)
        assert status == 400 and "access-control-allow-origin" not in headers
        # a page of another origin cannot read a CSRF token either
        _, headers, _ = request(port, "GET", "/api/csrf-token?client=x", Origin=origin)
        assert "access-control-allow-origin" not in headers


def test_an_slca_flow_command_runs_against_it(server, tmp_path):
    port, env = server
    params = tiny_params(tmp_path)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({k: params[k] for k in ("prepare", "validate")}))
    done = subprocess.run(
        [SLCA, "data", "--params", str(path)],
        env=dict(env, PREFECT_HOME=str(tmp_path / "client-home")),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # a refused request shows as CSRF or a 403 status; a log timestamp may end in .403
    assert "CSRF" not in done.stderr
    assert not re.search(r"(?<![\d.:])403\b", done.stderr), done.stderr[-3000:]
    # the run is on this server, read through Prefect's own client (CSRF token and all)
    from prefect.client.orchestration import get_client

    with prefect_api(env["PREFECT_API_URL"]):
        with get_client(sync_client=True) as client:
            runs = client.read_flow_runs()
            names = {client.read_flow(run.flow_id).name: run.state_name for run in runs}
    assert names.get("data") == "Completed", names
