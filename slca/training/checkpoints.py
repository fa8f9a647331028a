"""A checkpoint directory's ``step_*`` checkpoints: which are complete, the newest, and
the trainer state each carries. The update engine writes them (:meth:`save`: state file
last, in a directory renamed into place); the run's identity beside them is
:mod:`slca.training.identity`'s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slca.training.engines import CLIENT_STATE, ENGINE_STATE


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
