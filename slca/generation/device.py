"""Device resolution: the torch device a ``device`` setting names, checked before any
work. Shared by the update engines, the rollout and judge engines and evaluation."""

from __future__ import annotations

import os

import torch


def resolve_device(setting: str | None, *, key: str = "engine.device") -> torch.device:
    """The device a ``device`` setting names (``null``: this process's GPU, else the
    CPU); ``cuda`` without an index is the launcher's ``LOCAL_RANK``. An unusable
    device is an error naming ``key`` before any work."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if setting is None:
        return torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(setting)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"{key}={setting!r} but torch {torch.__version__} sees no CUDA device; "
                f"set {key} to cpu (or null: the GPU when there is one)"
            )
        if device.index is None:
            device = torch.device("cuda", local)
        if device.index >= torch.cuda.device_count():
            raise ValueError(
                f"{key}={setting!r}: this machine has {torch.cuda.device_count()} CUDA devices"
            )
    return device
