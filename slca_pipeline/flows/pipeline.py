"""The ``pipeline`` flow: data → simulator_check → sft → one RL run per estimator →
evaluation of the SFT model and every RL model → the comparison report.

Every RL run starts from the same SFT checkpoint (GRPO against SLCA by default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from prefect import flow
from pydantic import Field

from slca.config.data import PrepareParams, ValidateParams
from slca.config.steps import BaseModelParams
from slca.generation.vllm_engine import check_engine
from slca.simulator.check import check_params
from slca_pipeline.flows.data import data
from slca_pipeline.flows.evaluate import evaluate, evaluate_params
from slca_pipeline.flows.params import DEFAULT_STATE_DIR, Estimator, load_document, section
from slca_pipeline.flows.sft import sft, sft_section
from slca_pipeline.flows.simulator_check import simulator_check
from slca_pipeline.flows.train import train, train_config

#: The RL runs of a pipeline run, each from the same SFT checkpoint.
DEFAULT_ESTIMATORS = ("grpo", "slca")


def pipeline_sections(
    document: dict[str, Any], params_file: str | Path, estimators: tuple[str, ...]
) -> tuple[dict[str, Any], str, Any]:
    """Every section the pipeline's steps read, validated: the RL config per estimator,
    the SFT model's directory and the SFT evaluation's params. No Prefect here: the CLI
    checks a document with it before a flow (and Prefect's server) starts."""
    for name, model in (
        ("prepare", PrepareParams),
        ("validate", ValidateParams),
        ("base_model", BaseModelParams),
    ):
        section(document, name, model, params_file)
    check_params(document, params_file)  # the check validates training's simulator backend
    configs = {e: train_config(document, params_file, e) for e in dict.fromkeys(estimators)}
    sft_dir = sft_section(document, params_file).out_dir
    evaluation = evaluate_params(document, params_file, sft_dir, "sft", must_exist=False)
    return configs, sft_dir, evaluation


@flow(name="pipeline", validate_parameters=True)
def pipeline(
    params_file: Path = Path("params.yaml"),
    overrides: dict[str, Any] | None = None,
    state_dir: Path = DEFAULT_STATE_DIR,
    estimators: Annotated[tuple[Estimator, ...], Field(min_length=1)] = DEFAULT_ESTIMATORS,
    overwrite: bool = False,
    document: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every step on ``params_file``; returns the MLflow run id per estimator and the
    report's path (``report``). ``overwrite`` lets an RL run replace another
    configuration's checkpoints and output (else such a run is refused).

    Every section is validated before the first step runs, so a bad RL setting fails in
    seconds, not after data preparation and SFT. ``params_file`` is read once, here,
    unless the caller read it (``document``, its overrides applied): the subflows run on
    that document (ADR 0081).
    """
    document = load_document(params_file, overrides, document)  # the one reading
    configs, sft_dir, evaluation = pipeline_sections(document, params_file, estimators)
    for config in configs.values():  # vLLM must be able to start before data and SFT run
        rollout = config.rollout
        check_engine(rollout.engine, rollout.vllm, setting="train.rollout.engine")
    check_engine(evaluation.engine, evaluation.vllm, setting="evaluate.engine")
    # every subflow gets the document read above (overrides applied), not the file again
    shared = {"params_file": params_file, "state_dir": state_dir, "document": document}
    data(**shared)
    simulator_check(**shared)
    sft(**shared)
    runs: dict[str, Any] = {e: train(**shared, estimator=e, overwrite=overwrite) for e in configs}
    models = {"sft": Path(sft_dir), **{e: Path(c.out_dir) for e, c in configs.items()}}
    runs["report"] = evaluate(**shared, models=models)
    return runs


if __name__ == "__main__":
    pipeline()
