"""Issue 36's reproductions that need the whole stage: random checkpoint corruption
(detected every time, resumed from the one before), and a damaged MLflow store (one
line naming train.tracking_dir, nothing written). The other reproductions live beside
the code they test: SIGTERM and a full disk in tests/training/test_session.py, the
checksums and fallback in tests/training/test_checkpoints.py, drift and bounded schemas
in tests/data/, the Host check in tests/slca_pipeline/test_server.py."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from slca.faults import FaultError
from slca.training.checkpoints import verify_checkpoint
from slca.training.session import run_train


def corrupt(checkpoint, rng: random.Random) -> str:
    """Truncate or flip bytes of one file of ``checkpoint`` chosen at random; what was
    done. Flipping (not zeroing) guarantees the bytes change."""
    files = sorted(p for p in checkpoint.rglob("*") if p.is_file() and p.stat().st_size > 0)
    target = rng.choice(files)
    size = target.stat().st_size
    if rng.random() < 0.5:
        os.truncate(target, rng.randrange(size))
        return f"truncated {target.name}"
    start = rng.randrange(size)
    length = min(size - start, rng.randint(1, 1024))
    with open(target, "r+b") as handle:
        handle.seek(start)
        flipped = bytes(b ^ 0xFF for b in handle.read(length))
        handle.seek(start)
        handle.write(flipped)
    return f"flipped {length} bytes of {target.name}"


@pytest.fixture(scope="module")
def finished(workspace, tmp_path_factory):
    """A finished three-step run with a checkpoint every step."""
    from helpers import tiny_params

    from slca.config.train import TrainConfig

    root = tmp_path_factory.mktemp("finished")
    config = TrainConfig.model_validate(
        {
            **tiny_params(workspace)["train"],
            "steps": 3,
            "checkpoint_every": 1,
            "tracking_dir": str(root / "mlflow"),
            "checkpoint_dir": str(root / "ckpt"),
            "out_dir": str(root / "rl"),
        }
    )
    run_train(config)
    return config, root


def test_ten_random_corruptions_are_all_detected_and_resume_falls_back(finished, tmp_path):
    config, root = finished
    rng = random.Random(36)
    for attempt in range(10):
        copy = tmp_path / f"ckpt{attempt}"
        shutil.copytree(root / "ckpt", copy)
        done = corrupt(copy / "step_000003", rng)
        assert verify_checkpoint(copy / "step_000003") is not None, done
        assert verify_checkpoint(copy / "step_000002") is None
    # one of them resumed through the stage: from step 2, the corrupt one set aside
    longer = config.model_copy(
        update={
            "steps": 4,
            "checkpoint_dir": str(tmp_path / "ckpt9"),
            "tracking_dir": str(tmp_path / "mlflow"),
            "out_dir": str(tmp_path / "rl"),
        }
    )
    run_train(longer, resume=True, track=False)
    assert (tmp_path / "ckpt9/corrupt.step_000003").is_dir()
    assert verify_checkpoint(tmp_path / "ckpt9/step_000004") is None


def test_a_damaged_store_is_one_line_naming_the_setting(config, tmp_path):
    store = tmp_path / "mlflow"
    store.mkdir()
    (store / "mlflow.db").write_bytes(random.Random(0).randbytes(64 * 1024))
    with pytest.raises(FaultError) as caught:
        run_train(config(tracking_dir=str(store)))
    said = str(caught.value)
    assert said.startswith(f"train.tracking_dir {store}: the MLflow store is damaged")
    assert "\n" not in said
    assert not (tmp_path / "ckpt").exists() or not list((tmp_path / "ckpt").rglob("step_*"))


def test_a_store_locked_by_another_process_is_one_line_naming_the_setting(config, tmp_path):
    """Another process holds the SQLite store (``BEGIN EXCLUSIVE``): after MLflow's bounded
    wait, one line naming train.tracking_dir (was a 94-line traceback)."""
    import sqlite3

    from slca.tracking import Tracker

    store = tmp_path / "mlflow"
    Tracker(store).ensure_experiment()  # a real, migrated store
    holder = sqlite3.connect(store / "mlflow.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(FaultError) as caught:
            run_train(config(tracking_dir=str(store)))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    said = str(caught.value)
    assert said.startswith(f"train.tracking_dir {store}: the MLflow store is locked")
    assert "\n" not in said
