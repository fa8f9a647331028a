"""The ``sft`` flow: build the base model, then the SFT warm start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from slca.config.steps import BaseModelParams, SFTParams
from slca_pipeline.flows.params import DEFAULT_STATE_DIR, read_document, section
from slca_pipeline.tasks.steps import run_step
from slca_pipeline.tasks.training import base_model_task, sft_task


@flow(name="sft", validate_parameters=True)
def sft(
    params_file: Path = Path("params.yaml"),
    overrides: dict[str, Any] | None = None,
    state_dir: Path = DEFAULT_STATE_DIR,
) -> dict[str, float]:
    """base_model → sft, from those sections of ``params_file``; returns the SFT losses."""
    document = read_document(params_file, overrides)
    base = section(document, "base_model", BaseModelParams, params_file)
    sft_params = section(document, "sft", SFTParams, params_file)
    run_step(base_model_task, base, state_dir)
    return run_step(sft_task, sft_params, state_dir)


if __name__ == "__main__":
    sft()
