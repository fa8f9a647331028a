import os

from hypothesis import HealthCheck, settings

# CI replays the same examples every run (a red CI must be reproducible);
# `HYPOTHESIS_PROFILE=explore` searches wider and with fresh randomness.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", deadline=None, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    """GPU tests run where CUDA (and the gpu extra) exist and are skipped, visibly, elsewhere."""
    import importlib.util

    import pytest
    import torch

    if torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and the gpu extra (vllm, deepspeed)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
