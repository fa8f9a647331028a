"""Issue 16, faults 1, 2, 4 and 6: outputs are never replaced blindly, a resume
continues its own run or refuses naming both, nothing is deleted before the inputs
load, and an MLflow checkpoint counts only with its completion marker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slca.tracking import RUN_FILE
from slca.training.checkpoints import latest_checkpoint
from slca.training.identity import IDENTITY_FILE, RunConflict, read_identity
from slca.training.session import run_train

mlflow = pytest.importorskip("mlflow")


def client(tmp_path: Path):
    return mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow/mlflow.db'}")


def steps_of(tmp_path, run_id, key="reward/tool"):
    return [m.step for m in client(tmp_path).get_metric_history(run_id, key)]


def runs_of(tmp_path, experiment="slca"):
    found = client(tmp_path).get_experiment_by_name(experiment)
    return [] if found is None else client(tmp_path).search_runs([found.experiment_id])


def someone_elses_model(directory: Path, run_id: str) -> dict[str, str]:
    """A model directory as another run left it; returns its files' contents."""
    directory.mkdir(parents=True)
    files = {"config.json": '{"other": true}', RUN_FILE: json.dumps({"run_id": run_id})}
    for name, text in files.items():
        (directory / name).write_text(text)
    return files


def unchanged(directory: Path, files: dict[str, str]) -> bool:
    return {p.name: p.read_text() for p in directory.iterdir()} == files


# --- fault 1: `slca train` deleted models/rl --------------------------------------------


def test_the_default_output_is_the_estimators_own_directory():
    from slca.config.train import TrainConfig
    from slca_pipeline.flows.train import train_config

    assert TrainConfig().out_dir == "models/rl/slca"
    assert TrainConfig(estimator="grpo").checkpoint_dir == "checkpoints/rl/grpo"
    document = {"train": {}}
    assert train_config(document, "params.yaml", None).out_dir == "models/rl/slca"
    assert train_config(document, "params.yaml", "grpo").out_dir == "models/rl/grpo"
    # a path without the placeholder gets the estimator appended, as before
    given = {"train": {"out_dir": "out", "checkpoint_dir": "ck"}}
    assert train_config(given, "params.yaml", "grpo").out_dir == "out/grpo"
    assert train_config(given, "params.yaml", "grpo").checkpoint_dir == "ck/grpo"


def test_a_run_never_replaces_other_runs_outputs(config, tmp_path):
    rl = tmp_path / "models/rl"
    grpo = someone_elses_model(rl / "grpo", "grpo-run")
    slca = someone_elses_model(rl / "slca", "slca-run")
    # the directory holding both is not an RL output: refused, nothing touched
    with pytest.raises(RunConflict, match=r"train.out_dir .*models/rl holds files that are not"):
        run_train(config(out_dir=str(rl)))
    # the slca default directory holds another run's model: refused, naming it
    with pytest.raises(RunConflict, match=r"output of run slca-run .*--overwrite"):
        run_train(config())
    assert unchanged(rl / "grpo", grpo) and unchanged(rl / "slca", slca)
    # another estimator writes its own directory and leaves both alone
    run_id = run_train(config(estimator="dr_grpo"))
    assert json.loads((rl / "dr_grpo" / RUN_FILE).read_text())["run_id"] == run_id
    assert unchanged(rl / "grpo", grpo) and unchanged(rl / "slca", slca)
    # --overwrite replaces the one directory it names
    run_train(config(), overwrite=True)
    assert json.loads((rl / "slca" / RUN_FILE).read_text())["fingerprint"]
    assert unchanged(rl / "grpo", grpo)


def test_a_rerun_of_the_same_configuration_replaces_its_own_output(config, tmp_path):
    first = run_train(config())
    second = run_train(config())  # a finished run of this configuration starts again
    assert first != second
    assert json.loads((tmp_path / "models/rl/slca" / RUN_FILE).read_text())["run_id"] == second
    # another configuration (more steps) is another output
    with pytest.raises(RunConflict, match="1 steps"):
        run_train(config(steps=2, checkpoint_dir=str(tmp_path / "ck2")))


# --- fault 2: --resume continued another run --------------------------------------------


def test_resume_refuses_another_runs_checkpoints_naming_both(config, tmp_path):
    shared = str(tmp_path / "shared")
    grpo_id = run_train(config(estimator="grpo", steps=2, checkpoint_dir=shared))
    before = read_identity(shared)
    assert before.run_id == grpo_id and before.estimator == "grpo"
    for resume in (False, True):
        with pytest.raises(RunConflict) as info:
            run_train(config(steps=3, checkpoint_dir=shared), resume=resume)
        message = str(info.value)
        assert grpo_id in message and "estimator grpo" in message
        assert "estimator slca" in message and "\n" not in message
    # nothing was logged into the grpo run, and no other run was made
    assert steps_of(tmp_path, grpo_id) == [1, 2]
    (run,) = runs_of(tmp_path)
    assert run.info.run_id == grpo_id and run.info.status == "FINISHED"
    assert read_identity(shared) == before
    assert latest_checkpoint(shared).name == "step_000002"


def test_resume_never_logs_into_a_run_whose_identity_differs(config, tmp_path, monkeypatch):
    """A run.json that claims another run's id (copied, edited) still cannot make a resume
    log into it: the MLflow run's own fingerprint tag must match."""
    import dataclasses

    from slca.training import identity as ids

    grpo_id = run_train(config(estimator="grpo", steps=1, checkpoint_dir=str(tmp_path / "g")))

    real_learn = __import__("slca.training.rl", fromlist=["Trainer"]).Trainer.learn

    def crash_at_step_2(self, sampled, scores):
        if self.state.step == 1:
            raise RuntimeError("crash")
        return real_learn(self, sampled, scores)

    monkeypatch.setattr("slca.training.rl.Trainer.learn", crash_at_step_2)
    ckpt = tmp_path / "s"
    with pytest.raises(RuntimeError, match="crash"):
        run_train(config(steps=2, checkpoint_dir=str(ckpt)))
    forged = dataclasses.replace(read_identity(ckpt), run_id=grpo_id)
    ids.write_identity(ckpt, forged)
    monkeypatch.undo()
    with pytest.raises(ValueError, match=rf"cannot resume run '{grpo_id}': another run"):
        run_train(config(steps=2, checkpoint_dir=str(ckpt)), resume=True)
    assert steps_of(tmp_path, grpo_id) == [1]


def test_a_crashed_run_resumes_its_own_mlflow_run(config, tmp_path, monkeypatch):
    from slca.training.rl import Trainer

    real_learn = Trainer.learn

    def crash_at_step_2(self, sampled, scores):
        if self.state.step == 1:
            raise RuntimeError("crash")
        return real_learn(self, sampled, scores)

    monkeypatch.setattr(Trainer, "learn", crash_at_step_2)
    with pytest.raises(RuntimeError, match="crash"):
        run_train(config(steps=3))
    monkeypatch.undo()
    ckpt = tmp_path / "ckpt/slca"
    first = read_identity(ckpt)
    assert first.status == "running"
    with pytest.raises(RunConflict, match="unfinished run .* --resume"):
        run_train(config(steps=3))  # without --resume: refused, not restarted
    run_id = run_train(config(steps=3), resume=True)
    assert run_id == first.run_id and steps_of(tmp_path, run_id) == [1, 2, 3]
    assert read_identity(ckpt).status == "completed"
    (run,) = runs_of(tmp_path)
    assert run.info.status == "FINISHED"


# --- fault 4: a typo emptied the checkpoint directory -----------------------------------


def test_nothing_is_deleted_before_the_inputs_load(config, tmp_path):
    ckpt = tmp_path / "ckpt/slca"
    run_train(config(steps=2, estimator="grpo", checkpoint_dir=str(ckpt)))
    kept = sorted(p.name for p in ckpt.iterdir())
    # even --overwrite removes nothing when an input is missing
    with pytest.raises(FileNotFoundError, match="sftt"):
        run_train(
            config(init_dir=str(tmp_path / "models/sftt"), checkpoint_dir=str(ckpt)), overwrite=True
        )
    with pytest.raises(FileNotFoundError, match="no train task"):
        run_train(
            config(in_dir=str(tmp_path / "no-data"), checkpoint_dir=str(ckpt)), overwrite=True
        )
    assert sorted(p.name for p in ckpt.iterdir()) == kept
    assert (ckpt / IDENTITY_FILE).exists()


# --- fault 6: half-uploaded checkpoints --------------------------------------------------


def test_a_cut_short_checkpoint_upload_is_ignored_then_uploaded_again(
    config, tmp_path, monkeypatch
):
    from slca.tracking import COMPLETE_MARKER, logged_checkpoints
    from slca.training.rl import Trainer

    real_learn = Trainer.learn

    def crash_at_step_3(self, sampled, scores):
        if self.state.step == 2:
            raise RuntimeError("crash")
        return real_learn(self, sampled, scores)

    monkeypatch.setattr(Trainer, "learn", crash_at_step_3)
    with pytest.raises(RuntimeError, match="crash"):
        run_train(config(steps=3))
    monkeypatch.undo()
    run_id = read_identity(tmp_path / "ckpt/slca").run_id
    # what kill -9 in the middle of uploading step 2 leaves: some files, a temporary, no marker
    artifacts = Path(client(tmp_path).get_run(run_id).info.artifact_uri.removeprefix("file://"))
    step_2 = artifacts / "checkpoints/step_2"
    (step_2 / COMPLETE_MARKER).unlink()
    (step_2 / "model.safetensors").unlink()
    (step_2 / ".artifact.uploading.x1y2").write_bytes(b"half")
    assert sorted(logged_checkpoints(run_id, tracking_uri=client(tmp_path).tracking_uri)) == [1]
    run_train(config(steps=3), resume=True)
    local = tmp_path / "ckpt/slca/step_000002"
    assert sorted(p.name for p in step_2.iterdir()) == sorted(
        [COMPLETE_MARKER, *(p.name for p in local.iterdir())]
    )
    assert (step_2 / "model.safetensors").read_bytes() == (local / "model.safetensors").read_bytes()
    assert sorted(logged_checkpoints(run_id, tracking_uri=client(tmp_path).tracking_uri)) == [
        1,
        2,
        3,
    ]


@pytest.mark.slow
def test_a_typo_in_a_flow_rerun_deletes_no_checkpoint(
    prefect_harness, settings, workspace, tmp_path
):
    """The flow's planning used to remove "checkpoints of another configuration" before
    the run had loaded anything: a mistyped init_dir emptied the directory, then failed."""
    import yaml

    from slca_pipeline.flows.train import train

    params = tmp_path / "params.yaml"
    validate = {"in_dir": str(workspace / "data/tasks"), "report_dir": str(tmp_path / "val")}
    params.write_text(yaml.safe_dump({"train": settings(steps=2), "validate": validate}))
    state = tmp_path / "state"
    train(params_file=params, state_dir=state, estimator="grpo")
    ckpt = tmp_path / "ckpt/grpo"
    kept = {p.name: p.stat().st_mtime_ns for p in ckpt.iterdir()}
    assert "step_000002" in kept
    typo = {"train.init_dir": str(workspace / "models/sftt")}
    with pytest.raises(FileNotFoundError, match="sftt"):
        train(params_file=params, overrides=typo, state_dir=state, estimator="grpo")
    assert {p.name: p.stat().st_mtime_ns for p in ckpt.iterdir()} == kept
