"""Prefect in tests: a private home, analytics off, one test server for the module."""

import os
import tempfile
from pathlib import Path

import pytest
import yaml

# before the first `import prefect`: settings are read when Prefect loads
_HOME = tempfile.mkdtemp(prefix="slca-prefect-home-")
os.environ["PREFECT_HOME"] = _HOME
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.pop("PREFECT_API_URL", None)


def tiny_params(root: Path) -> dict:
    """The tiny configuration (as tests/training/test_stages.py): 40 synthetic tasks, a
    hidden_size=32 model, SFT on 8 tasks, 2 RL steps; every path under ``root``."""
    return {
        "prepare": {
            "sources": ["synth"],
            "out_dir": str(root / "data/tasks"),
            "synth": {"n_tasks": 40, "domains": ["weather"]},
        },
        "validate": {"in_dir": str(root / "data/tasks"), "report_dir": str(root / "data/val")},
        "simulator_check": {
            "in_dir": str(root / "data/tasks"),
            "report_dir": str(root / "data/simcheck"),
        },
        "base_model": {
            "in_dir": str(root / "data/tasks"),
            "out_dir": str(root / "models/base"),
            "vocab_size": 400,
            "hidden_size": 32,
            "intermediate_size": 64,
        },
        "sft": {
            "base_dir": str(root / "models/base"),
            "in_dir": str(root / "data/tasks"),
            "out_dir": str(root / "models/sft"),
            "epochs": 2,
            "max_tasks": 8,
            "micro_batch_size": 4,
        },
        "train": {
            "steps": 2,
            "checkpoint_every": 1,
            "histogram_every": 2,
            "init_dir": str(root / "models/sft"),
            "in_dir": str(root / "data/tasks"),
            "out_dir": str(root / "models/rl"),
            "checkpoint_dir": str(root / "ckpt"),
            "tracking_dir": str(root / "mlflow"),
            "rollout": {
                "tasks_per_step": 2,
                "group_size": 2,
                "max_new_tokens": 16,
                "max_turns": 2,
                "max_total_tokens": 4096,
            },
            "update": {"micro_batch_size": 4},
        },
    }


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
