"""Verified checkpoints: every file's sha256 recorded as it is published, a resume that
sets aside a checkpoint that fails and falls back to the one before, and what a killed
save leaves cleaned up."""

import json
import os
import shutil
from pathlib import Path

import pytest
from trainer_world import build_world, make

from slca.training.checkpoints import (
    CheckpointError,
    clean_staging,
    complete_checkpoints,
    set_aside,
    verify_checkpoint,
)
from slca.training.engine_support import CHECKSUMS


@pytest.fixture(scope="module")
def world():
    return build_world()


@pytest.fixture(scope="module")
def three_steps(world, tmp_path_factory):
    """A directory of three checkpoints (step 1, 2, 3), copied per test."""
    root = tmp_path_factory.mktemp("three")
    make(world, root, steps=3)[0].run()
    return root / "ckpt"


@pytest.fixture
def checkpoints(three_steps, tmp_path):
    return Path(shutil.copytree(three_steps, tmp_path / "ckpt"))


def zero_inside(path: Path, length: int = 1024) -> None:
    """Overwrite ``length`` bytes in the middle with zeros, the size unchanged."""
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.seek(size // 2)
        handle.write(b"\0" * min(length, size // 2))


def test_every_file_is_listed_with_its_sha256_and_verifies(checkpoints):
    latest = checkpoints / "step_000003"
    listed = json.loads((latest / CHECKSUMS).read_text())
    assert {"model.safetensors", "optimizer.pt", "client_state.json", "engine.json"} <= set(listed)
    assert all(len(d) == 64 for d in listed.values())
    assert verify_checkpoint(latest) is None


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda p: zero_inside(p / "model.safetensors"), "model.safetensors does not match"),
        (lambda p: os.truncate(p / "optimizer.pt", 100), "optimizer.pt does not match"),
        (lambda p: (p / "scheduler.pt").unlink(), "scheduler.pt is missing"),
        (lambda p: (p / CHECKSUMS).write_text("{"), "unreadable"),
    ],
)
def test_damage_is_named(checkpoints, damage, reason):
    latest = checkpoints / "step_000003"
    damage(latest)
    assert reason in verify_checkpoint(latest)


def test_resume_sets_aside_an_altered_latest_and_continues_from_the_one_before(
    world, checkpoints, caplog
):
    zero_inside(checkpoints / "step_000003" / "model.safetensors")  # same size: loads fine
    trainer, _, recorder = make(world, checkpoints.parent, steps=4, model_seed=99)
    assert trainer.restore()
    assert trainer.state.step == 2
    assert (checkpoints / "corrupt.step_000003").is_dir()
    assert "model.safetensors does not match" in caplog.text
    assert trainer.run().step == 4
    assert [s for s, _ in recorder.metrics] == [3, 4]


def test_a_checkpoint_without_checksums_that_does_not_load_is_set_aside(world, checkpoints):
    """Written before checksums were recorded: trusted until it fails to load."""
    latest = checkpoints / "step_000003"
    (latest / CHECKSUMS).unlink()
    os.truncate(latest / "optimizer.pt", (latest / "optimizer.pt").stat().st_size // 2)
    trainer = make(world, checkpoints.parent, steps=4)[0]
    assert trainer.restore() and trainer.state.step == 2
    assert (checkpoints / "corrupt.step_000003").is_dir()


def test_no_checkpoint_that_verifies_is_one_error_naming_the_directory(world, checkpoints):
    for checkpoint in complete_checkpoints(checkpoints):
        zero_inside(checkpoint / "model.safetensors")
    trainer = make(world, checkpoints.parent, steps=4)[0]
    with pytest.raises(CheckpointError, match=r"ckpt: none of its 3 checkpoints verifies"):
        trainer.restore()
    assert sorted(p.name for p in checkpoints.glob("corrupt.*")) == [
        "corrupt.step_000001",
        "corrupt.step_000002",
        "corrupt.step_000003",
    ]


def test_set_aside_never_replaces_an_earlier_one(tmp_path):
    for _ in range(2):
        (tmp_path / "step_000001").mkdir()
        set_aside(tmp_path / "step_000001")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "corrupt.step_000001",
        "corrupt.step_000001.2",
    ]


def test_clean_staging_restores_a_checkpoint_moved_aside_mid_replace(tmp_path):
    (tmp_path / ".step_000002.old").mkdir()  # killed between the two renames
    (tmp_path / ".step_000002.old" / "engine.json").write_text("{}")
    (tmp_path / ".step_000002.tmp").mkdir()
    (tmp_path / "step_000001").mkdir()
    (tmp_path / ".step_000001.old").mkdir()  # its replacement was published
    (tmp_path / ".step_000003.tmp").mkdir()  # killed mid-save
    done = clean_staging(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000001", "step_000002"]
    assert (tmp_path / "step_000002" / "engine.json").exists()
    assert "restored step_000002 from .step_000002.old" in done


def test_verify_checkpoints_off_skips_the_hashing_and_on_detects_corruption(
    world, checkpoints, tmp_path, monkeypatch
):
    """``train.verify_checkpoints: false``: no sha256 on save (no checksums.json) nor on
    resume, which trusts an altered checkpoint that loads; on (the default), the same
    alteration is detected and the checkpoint before it taken."""
    import slca.training.checkpoints as checkpoints_module
    import slca.training.engine_support as support

    hashed = []
    original = support.file_checksums

    def counting(root):
        hashed.append(root)
        return original(root)

    monkeypatch.setattr(support, "file_checksums", counting)
    monkeypatch.setattr(checkpoints_module, "file_checksums", counting)
    make(world, tmp_path / "off", steps=2, verify_checkpoints=False)[0].run()
    saved = tmp_path / "off/ckpt"
    assert [p.name for p in complete_checkpoints(saved)] == ["step_000001", "step_000002"]
    assert not list(saved.rglob(CHECKSUMS)) and hashed == []
    zero_inside(saved / "step_000002" / "model.safetensors")  # same size: loads
    trainer = make(world, tmp_path / "off", steps=3, verify_checkpoints=False)[0]
    assert trainer.restore() and trainer.state.step == 2  # trusted: nothing hashed
    assert hashed == [] and not list(saved.glob("corrupt.*"))

    # on (the default; `checkpoints` was saved with it): the same damage is caught
    assert all((c / CHECKSUMS).is_file() for c in complete_checkpoints(checkpoints))
    zero_inside(checkpoints / "step_000003" / "model.safetensors")
    trainer = make(world, checkpoints.parent, steps=4)[0]
    assert trainer.restore() and trainer.state.step == 2
    assert hashed and (checkpoints / "corrupt.step_000003").is_dir()
