"""The RL stage end to end on the tiny model (slca.training.session): MLflow, a kill -9
and its resume, torchrun with ZeRO-3, validation, the configured simulator and judge,
and a run without tracking."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from helpers import DESIGN_METRICS, tiny_params

from slca.config.train import TrainConfig
from slca.modeling import load_causal_lm
from slca.training.checkpoints import latest_checkpoint
from slca.training.session import run_train

mlflow = pytest.importorskip("mlflow")


def train_config(root, **over):
    settings = {**tiny_params(root)["train"], "histogram_every": 1, **over}
    return TrainConfig.model_validate(settings)


def history(root, run_id, key):
    client = mlflow.tracking.MlflowClient(f"sqlite:///{root / 'mlflow/mlflow.db'}")
    return [m.step for m in client.get_metric_history(run_id, key)]


def test_rl_logs_every_metric_histograms_and_checkpoints_to_mlflow(workspace):
    root, _ = workspace
    config = train_config(root, tracking_dir=str(root / "mlflow"), experiment="once")
    run_id = run_train(config)
    for key in DESIGN_METRICS:
        assert history(root, run_id, key) == [1, 2], key
    client = mlflow.tracking.MlflowClient(f"sqlite:///{root / 'mlflow/mlflow.db'}")
    artifacts = {a.path for a in client.list_artifacts(run_id, "histograms/step_1")}
    assert {"histograms/step_1/tool.png", "histograms/step_1/values.npz"} <= artifacts
    assert client.list_artifacts(run_id, "checkpoints/step_2")
    params = client.get_run(run_id).data.params
    assert params["algorithm.advantage.estimator"] == "slca" and "git.commit" in params
    # the task data it trained on, as an MLflow dataset: digest the hash the run records
    from slca.tracking import read_inputs

    (dataset,) = read_inputs(client.get_run(run_id).inputs)
    assert dataset["digest"] == params["data_hash.read.train"][:36]
    assert dataset["content_sha256"] == params["data_hash.read.train"]
    assert dataset["source"] == str((root / "data/tasks/train.parquet").resolve())
    assert (dataset["name"], dataset["context"]) == ("tasks/train", "training")
    assert load_causal_lm(root / "models/rl")[0].config.hidden_size == 32
    (logged,) = mlflow.search_logged_models(
        experiment_ids=[client.get_run(run_id).info.experiment_id], output_format="list"
    )
    assert logged.source_run_id == run_id


def test_sigterm_mid_run_ends_it_killed_then_resume_continues_the_same_run(workspace, tmp_path):
    """SIGTERM on the stage command DVC runs (and a Prefect worker's cancellation sends):
    the MLflow run ends KILLED with an end time, no lock owner file stays, and a resume
    continues the same run with every step once. (kill -9: tests/reliability.)"""
    root, _ = workspace
    config = train_config(
        root,
        steps=4,
        checkpoint_dir=str(tmp_path / "ckpt"),
        tracking_dir=str(tmp_path / "mlflow"),
        out_dir=str(tmp_path / "rl"),
    )
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"train": config.model_dump(mode="json")}))
    command = [sys.executable, "-m", "slca.training.stages", "train", "--params", str(params)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("MLFLOW_TRACKING_URI", None)  # mlflow exports the last store this process used
    job = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.time() + 240
    while time.time() < deadline and job.poll() is None:
        latest = latest_checkpoint(tmp_path / "ckpt")
        if latest is not None and latest.name >= "step_000002":
            break
        time.sleep(0.2)
    assert job.poll() is None, job.stderr.read().decode()[-2000:]
    os.killpg(job.pid, signal.SIGTERM)
    assert job.wait(timeout=120) != 0
    killed_at = int(latest_checkpoint(tmp_path / "ckpt").name.split("_")[1])
    assert killed_at < 4
    assert not list(tmp_path.rglob("*.owner")), list(tmp_path.rglob("*.owner"))
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow/mlflow.db'}")
    (stopped,) = client.search_runs([client.get_experiment_by_name("slca").experiment_id])
    assert stopped.info.status == "KILLED" and stopped.info.end_time is not None
    done = subprocess.run(
        [*command, "--resume"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow/mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "slca"]
    (run,) = client.search_runs([experiment.experiment_id])
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "reward/tool")]
    assert steps == [1, 2, 3, 4]  # one run, each step once, none lost after the checkpoint
    assert run.info.run_id == done.stdout.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed"
)
def test_the_train_stage_under_torchrun_with_zero3_tracks_and_writes_once(workspace, tmp_path):
    """2 ranks, DeepSpeed ZeRO-3 on CPU, the real HF rollout engine (a copy per rank: a
    ZeRO-3 module holds a shard): one MLflow run with every step once, one final model
    (gathered, loadable), checkpoints with both ranks' RNG, the run id printed once."""
    root, _ = workspace
    config = train_config(
        root,
        checkpoint_dir=str(tmp_path / "ckpt"),
        tracking_dir=str(tmp_path / "mlflow"),
        out_dir=str(tmp_path / "rl"),
        engine={"engine": "deepspeed", "zero_stage": 3, "bf16": False},
    )
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"train": config.model_dump(mode="json")}))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--log-dir", str(tmp_path / "torchrun")]  # else a torchelastic_* in /tmp
    command += ["--nproc_per_node", "2", "-m", "slca.training.stages", "train"]
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        [*command, "--params", str(params)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    printed = done.stdout.split()
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow/mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "slca"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert printed == [run.info.run_id]
    for key in DESIGN_METRICS:
        assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [1, 2], key
    steps = sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.name.startswith("step_"))
    assert steps == ["step_000001", "step_000002"]
    identity = json.loads((tmp_path / "ckpt/run.json").read_text())  # rank 0's, once
    assert identity["run_id"] == run.info.run_id and identity["status"] == "completed"
    files = {p.name for p in (tmp_path / "ckpt/step_000002").iterdir()}
    assert {"rng_state_rank0.pt", "rng_state_rank1.pt", "deepspeed"} <= files
    final, _ = load_causal_lm(tmp_path / "rl")
    saved, _ = load_causal_lm(tmp_path / "ckpt/step_000002")
    assert all(torch.equal(v, saved.state_dict()[k]) for k, v in final.state_dict().items())
    assert any(v.abs().sum() > 0 for v in final.state_dict().values())


def test_validation_draws_a_fitting_seeded_subset_of_the_held_out_split(workspace):
    from slca.training.session import validation_tasks

    root, _ = workspace
    _, tokenizer = load_causal_lm(root / "models/base")
    assert validation_tasks(train_config(root), tokenizer) == []  # tiny_params: every 0
    config = train_config(root, validation={"every": 1, "max_tasks": 3})
    drawn = validation_tasks(config, tokenizer)
    assert len(drawn) == 3 and {t.split for t in drawn} == {"val"}
    assert [t.id for t in validation_tasks(config, tokenizer)] == [t.id for t in drawn]
    with pytest.raises(ValueError, match=r"train.validation: no 'test' task .* train.sources"):
        validation_tasks(
            train_config(root, sources=["nestful"], validation={"every": 1, "split": "test"}),
            tokenizer,
        )
    settings = {
        "tracking_dir": str(root / "mlflow"),
        "experiment": "val",
        "validation": {"every": 1, "max_tasks": 2},
        "out_dir": str(root / "models/rl_val"),
        "checkpoint_dir": str(root / "checkpoints/rl_val"),
    }
    run_id = run_train(train_config(root, **settings))
    # step 0: the SFT policy, validated before the first update
    assert history(root, run_id, "val/success_at_0.9") == [0, 1, 2]
    assert history(root, run_id, "reward/tool") == [1, 2]


def test_the_session_builds_the_configured_simulator_and_judge_once(workspace, tmp_path):
    """train.simulator and the judge's local engine reach the trainer the stage runs; the
    judge rates the summaries of step 1 on its own model (the tiny base model here)."""
    from slca.rewards.preference import JudgeScorer
    from slca.training.session import training_session

    root, _ = workspace
    config = train_config(
        root,
        steps=1,
        out_dir=str(tmp_path / "out"),
        checkpoint_dir=str(tmp_path / "ckpt"),
        simulator={"seed": 5, "cache": str(tmp_path / "sim.sqlite")},
        rewards={
            "summary": {
                "name": "judge",
                "judge": {"model": str(root / "models/base"), "max_new_tokens": 4},
            }
        },
    )
    with training_session(config, track=False) as trainer:
        assert trainer.simulator.seed == 5 and trainer.simulator.backend.name == "schema"
        assert isinstance(trainer.summary_scorer, JudgeScorer)
        metrics = trainer.train_step()
        trainer.end_step(metrics)
    assert metrics["judge/engine_errors"] == 0
    assert (tmp_path / "sim.sqlite").exists()


def test_a_run_without_tracking_needs_no_mlflow(workspace, tmp_path):
    """track=False: the whole stage (the run file included) runs on a machine without
    MLflow (here: its import blocked; DeepSpeed, when installed, only tries it)."""
    root, _ = workspace
    config = train_config(
        root, steps=1, out_dir=str(tmp_path / "rl"), checkpoint_dir=str(tmp_path / "ckpt")
    )
    script = (
        "import sys\n"
        "sys.modules['mlflow'] = None  # import mlflow now raises ImportError\n"
        "from slca.config.train import TrainConfig\n"
        "from slca.training.session import run_train\n"
        "assert run_train(TrainConfig.model_validate_json(sys.argv[1]), track=False) is None\n"
    )
    env = dict(os.environ)
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        [sys.executable, "-c", script, config.model_dump_json()],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "rl/mlflow_run.json").read_text())["run_id"] is None


def test_a_resume_with_no_checkpoint_to_trust_changes_nothing_about_the_run(workspace, tmp_path):
    """Every checkpoint altered: one error naming the directory; run.json and the MLflow
    run's status are what the finished run left (issue 36: it used to turn FAILED and
    run.json claimed the longer run before the crash)."""
    from slca.training.checkpoints import CheckpointError

    root, _ = workspace
    config = train_config(
        root,
        checkpoint_dir=str(tmp_path / "ckpt"),
        tracking_dir=str(tmp_path / "mlflow"),
        out_dir=str(tmp_path / "rl"),
        checkpoint_every=1,
    )
    run_id = run_train(config)
    identity = (tmp_path / "ckpt/run.json").read_text()
    for checkpoint in (tmp_path / "ckpt").glob("step_*"):
        weights = checkpoint / "model.safetensors"
        with open(weights, "r+b") as handle:
            handle.seek(weights.stat().st_size // 2)
            handle.write(b"\0" * 512)
    longer = config.model_copy(update={"steps": config.steps + 2})
    with pytest.raises(CheckpointError, match="none of its 2 checkpoints verifies"):
        run_train(longer, resume=True)
    assert (tmp_path / "ckpt/run.json").read_text() == identity
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow/mlflow.db'}")
    assert client.get_run(run_id).info.status == "FINISHED"


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs (root only: skipped, visibly, where mounting is not allowed)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_under_the_checkpoints_is_one_line(workspace, tmp_path, small_disk):
    """The stage command: one line naming train.checkpoint_dir; no traceback."""
    root, _ = workspace
    train = {
        **tiny_params(root)["train"],
        "checkpoint_dir": str(small_disk / "ckpt"),
        "out_dir": str(tmp_path / "rl"),
        "tracking_dir": str(tmp_path / "mlflow"),
        "checkpoint_every": 1,
    }
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"train": train}))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(
        [sys.executable, "-m", "slca.training.stages", "train", "--params", str(params)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 1
    (said,) = [line for line in done.stderr.splitlines() if "train failed" in line]
    assert said.startswith(f"train failed: train.checkpoint_dir {small_disk / 'ckpt'}: ")
    assert "the disk is full" in said
    assert "Traceback" not in done.stderr


def test_a_finished_run_from_another_init_checkpoint_is_refused_unless_overwrite(
    workspace, tmp_path
):
    """The same configuration, data and ``init_dir`` path, but the checkpoint there now
    holds other weights (another base model's SFT): another experiment, not a rerun."""
    import shutil

    from slca.training.identity import RunConflict

    root, _ = workspace
    init = tmp_path / "sft"
    shutil.copytree(root / "models/sft", init)
    places = dict(
        steps=1,
        init_dir=str(init),
        out_dir=str(tmp_path / "rl"),
        checkpoint_dir=str(tmp_path / "ckpt"),
        validation={"every": 0},
    )
    config = train_config(root, **places)
    run_train(config, track=False)
    (init / "mlflow_run.json").write_text('{"run_id": "a rerun of the same SFT"}')
    run_train(config, track=False)  # the same weights: the same experiment, run again
    (init / "generation_config.json").write_text('{"do_sample": true}')
    before = (tmp_path / "rl/mlflow_run.json").read_bytes()
    with pytest.raises(RunConflict, match="choose another train.checkpoint_dir"):
        run_train(config, track=False)
    assert (tmp_path / "rl/mlflow_run.json").read_bytes() == before
    run_train(config, track=False, overwrite=True)
    assert (tmp_path / "rl/mlflow_run.json").read_bytes() != before
