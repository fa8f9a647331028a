"""What a start into a checkpoint directory may do (slca.training.identity.plan_start),
branch by branch, and when an output may be replaced."""

from __future__ import annotations

import dataclasses
import json

import pytest

from slca.config.train import TrainConfig
from slca.training.identity import (
    RunConflict,
    RunIdentity,
    check_output,
    config_fingerprint,
    init_hash,
    plan_start,
    remove_checkpoints,
    write_identity,
)

OURS = RunIdentity(estimator="slca", fingerprint="f-ours", data_hash="d", steps=4)


def directory(tmp_path, identity=None, steps=("step_000001", "step_000002")):
    root = tmp_path / "ckpt"
    root.mkdir()
    for name in steps:
        (root / name).mkdir()
    if identity is not None:
        write_identity(root, identity)
    return root


def theirs(**over):
    return dataclasses.replace(OURS, run_id="r-theirs", **over)


def test_an_empty_directory_starts_fresh(tmp_path):
    assert plan_start(directory(tmp_path, steps=()), OURS, resume=True, overwrite=False) == (
        "fresh",
        None,
    )


def test_killed_before_its_first_checkpoint_resume_continues_the_same_run(tmp_path):
    root = directory(tmp_path, theirs(), steps=())
    assert plan_start(root, OURS, resume=True, overwrite=False) == ("resume", theirs())
    assert plan_start(root, OURS, resume=False, overwrite=False)[0] == "fresh"


@pytest.mark.parametrize(
    "other",
    [theirs(fingerprint="f-other", estimator="grpo"), theirs(data_hash="other data"), None],
)
@pytest.mark.parametrize("resume", [False, True])
def test_another_runs_checkpoints_are_refused_naming_both_unless_overwrite(tmp_path, other, resume):
    root = directory(tmp_path, other)
    with pytest.raises(RunConflict) as info:
        plan_start(root, OURS, resume=resume, overwrite=False)
    message = str(info.value)
    assert "step_000001…step_000002" in message and "--overwrite" in message
    assert "run not yet tracked (estimator slca, config f-ours)" in message
    if other is None:
        assert "an unknown run (no run.json)" in message
    else:
        assert "run r-theirs" in message
    assert plan_start(root, OURS, resume=resume, overwrite=True) == ("replace", other)


def test_this_configurations_unfinished_run_needs_resume_or_overwrite(tmp_path):
    root = directory(tmp_path, theirs())
    assert plan_start(root, OURS, resume=True, overwrite=False) == ("resume", theirs())
    with pytest.raises(RunConflict, match="unfinished run r-theirs .* --resume"):
        plan_start(root, OURS, resume=False, overwrite=False)
    assert plan_start(root, OURS, resume=False, overwrite=True)[0] == "replace"


def test_this_configurations_finished_run_starts_again_or_trains_further(tmp_path):
    root = directory(tmp_path, theirs(status="completed"))
    assert plan_start(root, OURS, resume=True, overwrite=False)[0] == "replace"
    assert plan_start(root, OURS, resume=False, overwrite=False)[0] == "replace"
    further = dataclasses.replace(OURS, steps=8)
    assert plan_start(root, further, resume=True, overwrite=False)[0] == "resume"


def test_remove_checkpoints_removes_steps_and_identity_only(tmp_path):
    root = directory(tmp_path, theirs())
    (root / "notes.txt").write_text("mine")
    remove_checkpoints(root)
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]


def test_the_fingerprint_ignores_what_a_resume_may_change_and_nothing_else():
    base = TrainConfig()
    same = TrainConfig(
        steps=99,
        checkpoint_every=2,
        out_dir="elsewhere",
        checkpoint_dir="other",
        run_name="x",
        update={"micro_batch_size": 1},
        rollout={"generation_batch_size": 3},
        baseline="toolpo",
    )
    assert config_fingerprint(same) == config_fingerprint(base)
    for other in (
        TrainConfig(estimator="grpo"),
        TrainConfig(seed=1),
        TrainConfig(init_dir="models/other"),
        TrainConfig(engine={"optim": {"lr": 1e-3}}),  # the default is 1e-4
        TrainConfig(rollout={"temperature": 0.7}),
    ):
        assert config_fingerprint(other) != config_fingerprint(base)


def test_an_output_is_replaced_only_when_it_is_this_runs_or_this_configurations(tmp_path):
    out = tmp_path / "out"
    check_output(out, OURS, overwrite=False, run_file="run.json")  # absent
    out.mkdir()
    check_output(out, OURS, overwrite=False, run_file="run.json")  # empty
    record = {"run_id": "r1", "fingerprint": "f-ours", "data_hash": "d", "steps": 4}
    (out / "run.json").write_text(json.dumps(record))
    check_output(out, OURS, overwrite=False, run_file="run.json")  # same configuration
    check_output(
        out, dataclasses.replace(OURS, steps=9, run_id="r1"), overwrite=False, run_file="run.json"
    )  # the same run
    with pytest.raises(RunConflict, match=r"output of run r1 .*\(4 steps\).*\(9 steps\)"):
        check_output(out, dataclasses.replace(OURS, steps=9), overwrite=False, run_file="run.json")
    (out / "run.json").unlink()
    (out / "weights.bin").write_bytes(b"x")
    with pytest.raises(RunConflict, match="files that are not an RL run's output"):
        check_output(out, OURS, overwrite=False, run_file="run.json")
    check_output(out, OURS, overwrite=True, run_file="run.json")


def test_the_init_checkpoints_content_is_part_of_the_fingerprint(tmp_path):
    """Its weights and tokenizer count, the MLflow run that made it and dotfiles (locks,
    temp files) do not; a Hub id (no local directory) leaves the config's fingerprint."""
    init = tmp_path / "sft"
    init.mkdir()
    (init / "model.safetensors").write_bytes(b"weights")
    (init / "tokenizer.json").write_text("{}")
    first = init_hash(init)
    (init / "mlflow_run.json").write_text('{"run_id": "abc"}')
    (init / ".lock").write_text("1234")
    (init / "checkpoint-500").mkdir()  # a trainer's folder: not what from_pretrained reads
    (init / "checkpoint-500" / "optimizer.pt").write_bytes(b"adam state")
    assert init_hash(init) == first
    (init / "model.safetensors").write_bytes(b"other weights")
    assert init_hash(init) != first
    (init / "model.safetensors").write_bytes(b"weights")
    (init / "tokenizer.json").rename(init / "vocab.json")  # the same bytes, another file
    assert init_hash(init) != first
    assert init_hash(tmp_path / "absent") == ""
    config = TrainConfig()
    assert config_fingerprint(config, "") == config_fingerprint(config)
    assert len({config_fingerprint(config, h) for h in ("", first, init_hash(init))}) == 3
