"""Where a run came from: the git commit, and the pinned packages a logged model needs."""

from __future__ import annotations

import os
import subprocess
from importlib import metadata
from pathlib import Path


def git_commit(directory: str | os.PathLike[str] | None = None) -> tuple[str, bool | None]:
    """``(commit sha, dirty)`` of the git checkout holding ``directory`` (default: the
    working dir), or ``("unknown", None)`` outside a checkout or without git."""
    cwd = Path(directory) if directory is not None else Path.cwd()
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        if sha.returncode != 0:
            return "unknown", None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown", None
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return sha.stdout.strip(), dirty


def default_pip_requirements() -> list[str]:
    """What loading a logged model needs, pinned to the running versions.

    Given to ``mlflow.transformers.log_model`` explicitly: MLflow's own inference
    imports the model and, through transformers, torchvision, which is not installed.
    Local version labels (``2.13.0+cpu``) are dropped: pip cannot resolve them from PyPI.
    """
    pins = []
    for dist in ("mlflow", "torch", "transformers", "tokenizers", "safetensors", "numpy"):
        try:
            version = metadata.version(dist).split("+", 1)[0]
        except metadata.PackageNotFoundError:
            continue
        pins.append(f"{dist}=={version}")
    return pins


def cpu_kernels() -> str:
    """The CPU kernels torch runs (``AVX2`` where slca pinned them, slca/cpu_kernels.py):
    runs on other kernels may differ in the last bits of every float."""
    import torch

    return torch.backends.cpu.get_cpu_capability()
