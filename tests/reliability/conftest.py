"""The reliability suite's shared tiny workspace: task data, base model and SFT model,
built once per session (about a minute on two cores)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import tiny_params


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> Path:
    from slca.config.data import PrepareParams
    from slca.config.steps import BaseModelParams, SFTParams
    from slca.data.prepare import prepare
    from slca.training.stages import build_base_model, run_sft

    root = tmp_path_factory.mktemp("reliability")
    params = tiny_params(root)
    prepare(PrepareParams(**params["prepare"]))
    build_base_model(BaseModelParams(**params["base_model"]))
    run_sft(SFTParams(**params["sft"]))
    return root


@pytest.fixture()
def settings(workspace, tmp_path):
    """``settings(**over)``: the tiny ``train`` section as a dict, reading from the
    workspace and writing under the test's ``tmp_path``; one step unless told otherwise."""

    def make(**over) -> dict:
        data = {
            **tiny_params(workspace)["train"],
            "steps": 1,
            "tracking_dir": str(tmp_path / "mlflow"),
            "out_dir": str(tmp_path / "models/rl/{estimator}"),
            "checkpoint_dir": str(tmp_path / "ckpt/{estimator}"),
        }
        data.update(over)
        return data

    return make


@pytest.fixture()
def config(settings):
    """``config(**over)``: :func:`settings` as a validated ``TrainConfig``."""
    from slca.config.train import TrainConfig

    return lambda **over: TrainConfig.model_validate(settings(**over))
