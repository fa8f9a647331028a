"""The ``data`` flow: prepare the task data, then validate it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from slca.config.data import PrepareParams, ValidateParams
from slca_pipeline.flows.params import DEFAULT_STATE_DIR, load_document, section
from slca_pipeline.tasks.data import prepare_task, validate_task
from slca_pipeline.tasks.steps import run_step


@flow(name="data", validate_parameters=True)
def data(
    params_file: Path = Path("params.yaml"),
    overrides: dict[str, Any] | None = None,
    state_dir: Path = DEFAULT_STATE_DIR,
    document: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """prepare → validate, from the ``prepare`` and ``validate`` sections of ``params_file``
    (or of ``document``, the params a parent flow read: :func:`load_document`)."""
    document = load_document(params_file, overrides, document)
    prepare_params = section(document, "prepare", PrepareParams, params_file)
    validate_params = section(document, "validate", ValidateParams, params_file)
    summary = run_step(prepare_task, prepare_params, state_dir)
    run_step(validate_task, validate_params, state_dir)
    return summary


if __name__ == "__main__":
    data()
