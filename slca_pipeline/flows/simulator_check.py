"""The ``simulator_check`` flow: simulate gold calls and check the responses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from slca.simulator.check import check_params
from slca_pipeline.flows.params import DEFAULT_STATE_DIR, load_document
from slca_pipeline.tasks.simulator import simulator_check_task
from slca_pipeline.tasks.steps import run_step


@flow(name="simulator_check", validate_parameters=True)
def simulator_check(
    params_file: Path = Path("params.yaml"),
    overrides: dict[str, Any] | None = None,
    state_dir: Path = DEFAULT_STATE_DIR,
    document: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``simulator_check`` section of ``params_file`` (or of ``document``, the params a
    parent flow read: :func:`load_document`); returns the check's summary."""
    document = load_document(params_file, overrides, document)
    params = check_params(document, params_file)  # refused unless train.simulator's backend
    return run_step(simulator_check_task, params, state_dir)


if __name__ == "__main__":
    simulator_check()
