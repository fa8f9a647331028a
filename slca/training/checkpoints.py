"""A checkpoint directory's ``step_*`` checkpoints: which are complete, which verify,
the newest, and the trainer state each carries. The update engine writes them
(:meth:`save`: state file last, checksums as it publishes, in a directory renamed into
place); the run's identity beside them is :mod:`slca.training.identity`'s."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from slca.faults import CheckpointError
from slca.training.engine_support import CHECKSUMS, CLIENT_STATE, ENGINE_STATE, file_checksums

log = logging.getLogger(__name__)

__all__ = [
    "CheckpointError",
    "SET_ASIDE_PREFIX",
    "clean_staging",
    "complete_checkpoints",
    "first_line",
    "latest_checkpoint",
    "read_client_state",
    "set_aside",
    "verify_checkpoint",
]

SET_ASIDE_PREFIX = "corrupt."
"""A checkpoint that fails verification is renamed ``corrupt.step_<k>`` (never deleted):
out of the ``step_*`` listing, still there to inspect."""


def first_line(exc: BaseException) -> str:
    """An exception's first line (torch's errors run to dozens)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_client_state(checkpoint: Path) -> dict[str, Any]:
    """The trainer state a checkpoint carries (step, data cursor, run id)."""
    return json.loads((checkpoint / CLIENT_STATE).read_text())


def complete_checkpoints(directory: str | Path) -> list[Path]:
    """Every complete ``step_*`` checkpoint, oldest first (the engine writes its state
    file last, in a directory it renames into place)."""
    return sorted(
        p
        for p in Path(directory).glob("step_*")
        if (p / ENGINE_STATE).exists() and (p / CLIENT_STATE).exists()
    )


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete ``step_*`` checkpoint."""
    done = complete_checkpoints(directory)
    return done[-1] if done else None


def verify_checkpoint(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be trusted, or None when every file matches the sha256
    recorded as it was published. One written before checksums were recorded has none
    to check and is trusted as complete."""
    listed_path = checkpoint / CHECKSUMS
    if not listed_path.exists():
        return None
    try:
        listed = json.loads(listed_path.read_text())
    except (OSError, ValueError) as exc:
        return f"{CHECKSUMS} is unreadable ({exc})"
    found = file_checksums(checkpoint)
    for name, digest in sorted(listed.items()):
        if name not in found:
            return f"{name} is missing"
        if found[name] != digest:
            return f"{name} does not match its recorded sha256 (truncated or altered)"
    return None


def set_aside(checkpoint: Path) -> Path:
    """Rename ``checkpoint`` to ``corrupt.<name>`` beside it (``.2``, ``.3``, ... if
    taken) and return the new path."""
    target = checkpoint.with_name(SET_ASIDE_PREFIX + checkpoint.name)
    n = 1
    while target.exists():
        n += 1
        target = checkpoint.with_name(f"{SET_ASIDE_PREFIX}{checkpoint.name}.{n}")
    os.replace(checkpoint, target)
    return target


def clean_staging(directory: str | Path) -> list[str]:
    """Finish or drop what a killed save left (call it holding the directory's lock):
    a ``.step_<k>.old`` whose ``step_<k>`` is missing was the published checkpoint
    moved aside mid-replace, so it goes back; every other ``.step_*.tmp`` or
    ``.step_*.old`` is a staging copy no checkpoint depends on. Returns what it did."""
    root = Path(directory)
    done = []
    for old in sorted(root.glob(".step_*.old")):
        published = root / old.name[1 : -len(".old")]
        if not published.exists():
            os.replace(old, published)
            done.append(f"restored {published.name} from {old.name}")
    for stale in sorted([*root.glob(".step_*.tmp"), *root.glob(".step_*.old")]):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        done.append(f"removed {stale.name}")
    return done
