"""The credit benchmark's job list: both profiles in one experiment, commands that load."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.credit import run as credit
from slca.config import load_section, parse_override
from slca.config.train import TrainConfig

REPO = Path(__file__).resolve().parents[2]


def parse(*argv: str):
    return credit.parse_args(["--no-ablations", *argv])


def test_default_profile_jobs_are_unchanged():
    args = parse("--methods", "grpo", "slca", "toolpo", "--seeds", "0", "1")
    names = [j["name"] for j in credit.jobs(args)]
    assert names == ["grpo-s0", "slca-s0", "toolpo-s0", "grpo-s1", "slca-s1", "toolpo-s1"]
    assert all("extra" not in j for j in credit.jobs(args))


def test_both_profiles_run_the_reproduced_methods_under_reference_too():
    args = parse(
        "--methods", "grpo", "slca", "rltr", "--seeds", "0", "--profiles", "default", "reference"
    )
    jobs = credit.jobs(args)
    assert [j["name"] for j in jobs] == [
        "grpo-s0",
        "slca-s0",
        "rltr-s0",
        "grpo-ref-s0",
        "slca-ref-s0",
    ]
    reference = [j for j in jobs if "extra" in j]
    assert all(j["extra"] == ["train.algorithm.profile=reference"] for j in reference)
    with pytest.raises(SystemExit):
        parse("--profiles", "paper")


def test_each_train_command_loads_as_a_valid_config(tmp_path, monkeypatch):
    """The exact -S overrides each job passes, applied to params.yaml, validate."""
    commands = []
    monkeypatch.setattr(credit, "_chain", lambda name, cmds, log, work: commands.append(cmds))
    args = parse("--methods", "grpo", "slca", "--seeds", "0", "--profiles", "default", "reference")
    args.work, args.tracking_dir = tmp_path / "work", tmp_path / "mlflow"
    for job in credit.jobs(args):
        credit.run_job(job, args)
    profiles = []
    for train, _evaluate in commands:
        sets = [train[i + 1] for i, part in enumerate(train) if part == "-S"]
        overrides = dict(parse_override(text) for text in sets)
        config = load_section(REPO / "params.yaml", "train", TrainConfig, overrides)
        profiles.append((config.estimator, config.algorithm.profile, config.rewards.mode))
    assert profiles == [
        ("grpo", "default", "process"),
        ("slca", "default", "process"),
        ("grpo", "reference", "reference"),
        ("slca", "reference", "reference"),
    ]


def test_the_lab_runs_through_the_documented_module_command():
    """`python -m benchmarks.credit.run --lab` (docs/how-to/credit-study.md) reaches the
    lab's own options: the package imports resolve from the repo root, no sys.path edits."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.credit.run", "--lab", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--spreads" in done.stdout and "GRPO against SLCA" in done.stdout


def test_the_last_histograms_of_seed_0_are_copied_and_no_download_is_left(tmp_path, monkeypatch):
    import tempfile

    from mlflow.tracking import MlflowClient

    store = tmp_path / "mlflow"
    store.mkdir()
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    experiment = client.create_experiment("credit", artifact_location=str(tmp_path / "art"))
    run = client.create_run(experiment, run_name="slca-s0")
    for step in (5, 15):
        folder = tmp_path / f"step_{step}"
        folder.mkdir()
        (folder / "tool.png").write_bytes(f"step {step}".encode())
        client.log_artifact(run.info.run_id, str(folder), "histograms")
    client.set_terminated(run.info.run_id)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    args = parse("--methods", "slca", "--seeds", "0", "--tracking-dir", str(store),
                 "--out", str(tmp_path / "out"))  # fmt: skip
    args.out.mkdir()

    copied = credit.copy_histograms(args)

    assert [p.name for p in copied] == ["hist_slca_tool.png"]
    assert copied[0].read_bytes() == b"step 15"
    assert list(scratch.iterdir()) == []
