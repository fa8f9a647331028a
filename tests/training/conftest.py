"""The tiny pipeline's data, base model and SFT checkpoint, built once for the training
stage tests (test_stages.py, test_session.py, test_pretrain.py)."""

import pytest
from helpers import tiny_params

from slca.config.data import PrepareParams
from slca.config.steps import BaseModelParams, SFTParams
from slca.data.prepare import prepare
from slca.training.stages import build_base_model, run_sft


@pytest.fixture(scope="package")
def tiny_tasks(tmp_path_factory):
    """``root`` with the tiny pipeline's task data (train, val and test splits) in
    ``root/data/tasks``: prepare only."""
    root = tmp_path_factory.mktemp("pipeline")
    prepare(PrepareParams(**tiny_params(root)["prepare"]))
    return root


@pytest.fixture(scope="package")
def workspace(tiny_tasks):
    """``(root, sft figures)``: task data, ``models/base`` and ``models/sft`` under root."""
    root = tiny_tasks
    params = tiny_params(root)
    build_base_model(BaseModelParams(**params["base_model"]))
    figures = run_sft(SFTParams(**params["sft"]))
    return root, figures
