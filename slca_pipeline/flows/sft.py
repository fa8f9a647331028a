"""The ``sft`` flow: build the base model, then the SFT warm start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from slca.config.steps import BaseModelParams, SFTParams
from slca_pipeline.flows.params import DEFAULT_STATE_DIR, load_document, section
from slca_pipeline.tasks.steps import run_step
from slca_pipeline.tasks.training import base_model_task, sft_task


def sft_section(document: dict[str, Any], params_file: str | Path) -> SFTParams:
    """The ``sft`` section; its MLflow store and experiment default to the ``train``
    section's (``train.tracking_dir``, ``train.experiment``), where the RL runs and the
    evaluations go, so the SFT model's evaluation is logged into the SFT run."""
    raw = document.get("sft") or {}
    train = document.get("train") or {}
    data = dict(raw)
    for key in ("tracking_dir", "experiment"):
        if key not in raw and key in train:
            data[key] = train[key]
    return section({**document, "sft": data}, "sft", SFTParams, params_file)


@flow(name="sft", validate_parameters=True)
def sft(
    params_file: Path = Path("params.yaml"),
    overrides: dict[str, Any] | None = None,
    state_dir: Path = DEFAULT_STATE_DIR,
    document: dict[str, Any] | None = None,
) -> dict[str, float]:
    """base_model → sft, from those sections of ``params_file`` (or of ``document``, the
    params a parent flow read: :func:`load_document`); returns the SFT losses."""
    document = load_document(params_file, overrides, document)
    base = section(document, "base_model", BaseModelParams, params_file)
    sft_params = sft_section(document, params_file)
    run_step(base_model_task, base, state_dir)
    return run_step(sft_task, sft_params, state_dir)


if __name__ == "__main__":
    sft()
