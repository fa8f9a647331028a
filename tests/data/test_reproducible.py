"""`dvc repro` on a fresh clone rebuilds the task data byte for byte."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slca.config.data import PrepareParams
from slca.data.prepare import prepare
from slca.data.sources import MissingSource

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("nestful", "bfcl_eval", "tau2")


def _committed(path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "show", f"HEAD:{path}"], check=True, capture_output=True, text=True
    ).stdout


@pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(),
    reason="needs the project's git checkout",
)
@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in SOURCES),
    reason="source packages missing: run `make data-sources`",
)
def test_fresh_clone_dvc_repro_reproduces_the_locked_outputs(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    run = subprocess.run(
        [str(Path(sys.executable).parent / "dvc"), "repro", "prepare"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-2000:]

    # Code, params and outputs all as locked: a change to prepare's code that was not
    # followed by `make data` (and a commit of dvc.lock) fails here.
    locked = yaml.safe_load(_committed("dvc.lock"))["stages"]["prepare"]
    rebuilt = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]["prepare"]
    assert rebuilt == locked
    manifest = json.loads((clone / "data/tasks/manifest.json").read_text())
    assert manifest["totals"]["train"] > 0 and manifest["totals"]["eval"] > 0
    assert set(manifest["content_sha256"]) == {"train", "val", "test", "eval"}


def test_a_missing_source_package_is_named_with_the_install_command(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "bfcl_eval" else real_find_spec(name, *a),
    )
    params = PrepareParams(sources=["bfcl"], out_dir=str(tmp_path / "tasks"))
    with pytest.raises(
        MissingSource,
        match=r"bfcl: package 'bfcl-eval' is not installed.*"
        r"make data-sources",
    ):
        prepare(params)
    assert not (tmp_path / "tasks").exists()  # nothing half-written
