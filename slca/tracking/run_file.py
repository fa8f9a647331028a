"""The run file: what a trained model's directory says about the MLflow run that made it.
It imports no MLflow: a run with tracking off writes and checks it too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RUN_FILE = "mlflow_run.json"
"""Written into an RL stage's ``out_dir``: the MLflow run (and experiment) that made the
model, so an evaluation can log into the same run."""


def read_run_file(model_dir: str | Path) -> dict[str, Any]:
    """The run file of ``model_dir`` as written (``run_id``, ``experiment``, ...); empty
    when the model has none (not made by an RL stage)."""
    path = Path(model_dir) / RUN_FILE
    return json.loads(path.read_text()) if path.exists() else {}
