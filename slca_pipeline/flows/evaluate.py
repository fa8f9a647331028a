"""The ``evaluate`` flow: models on the held-out sets, then the comparison report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from prefect import flow
from pydantic import Field

from slca.config.evaluate import EvaluateParams
from slca.config.train import TrainConfig
from slca_pipeline.flows.params import DEFAULT_STATE_DIR, load_document, section
from slca_pipeline.tasks.evaluation import evaluate_task, report_task
from slca_pipeline.tasks.steps import run_step

DEFAULT_REPORT_DIR = Path("reports/summary")


def evaluate_params(
    document: dict[str, Any],
    params_file: str | Path,
    model_dir: str | Path,
    name: str,
    must_exist: bool = True,
) -> EvaluateParams:
    """The ``evaluate`` section for one model: report ``<report dir>/<name>.json``, the
    experiment and store of the ``train`` section, MLflow run name ``name``. With
    ``must_exist``, a missing model directory is an error (checked before any work)."""
    if must_exist and not Path(model_dir).is_dir():
        raise FileNotFoundError(f"models.{name}: {model_dir} is not a model directory")
    config = section(document, "evaluate", EvaluateParams, params_file)
    train = section(document, "train", TrainConfig, params_file)
    data = config.model_dump()
    data.update(
        model_dir=str(model_dir),
        report_path=str(Path(config.report_path).parent / f"{name}.json"),
        run_name=name,
        tracking_dir=train.tracking_dir,
        experiment=train.experiment,
    )
    return section({"evaluate": data}, "evaluate", EvaluateParams, params_file)


@flow(name="evaluate", validate_parameters=True)
def evaluate(
    models: Annotated[dict[str, Path], Field(min_length=1)],
    params_file: Path = Path("params.yaml"),
    overrides: dict[str, Any] | None = None,
    state_dir: Path = DEFAULT_STATE_DIR,
    document: dict[str, Any] | None = None,
    report_dir: Path = DEFAULT_REPORT_DIR,
) -> str:
    """Evaluate each model (``{name: model_dir}``), then write the report of the whole
    MLflow experiment; returns the report's path. ``document``: the params a parent flow
    read (:func:`load_document`)."""
    document = load_document(params_file, overrides, document)
    settings = {name: evaluate_params(document, params_file, d, name) for name, d in models.items()}
    for params in settings.values():
        run_step(evaluate_task, params, state_dir)
    train = section(document, "train", TrainConfig, params_file)
    return report_task(train.tracking_dir, train.experiment, str(report_dir))


if __name__ == "__main__":
    evaluate()
