"""Prefect in tests: a private home, analytics off, one test server for the module."""

import os
import tempfile
from pathlib import Path

import pytest
import yaml
from helpers import tiny_params

# before the first `import prefect`: settings are read when Prefect loads
_HOME = tempfile.mkdtemp(prefix="slca-prefect-home-")
os.environ["PREFECT_HOME"] = _HOME
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.pop("PREFECT_API_URL", None)


@pytest.fixture(scope="session")
def write_tiny_params():
    def write(root: Path, **sections) -> Path:
        params = tiny_params(root)
        for name, values in sections.items():
            params[name] = {**params[name], **values}
        path = root / "params.yaml"
        path.write_text(yaml.safe_dump(params, sort_keys=False))
        return path

    return write


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
