"""dvc.yaml end to end in a fresh clone on the tiny configuration: `dvc repro` runs
every stage, and `dvc exp run -S train.estimator=grpo` trains the method arm with GRPO."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import tiny_params

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.long,
    pytest.mark.skipif(
        shutil.which("git") is None or not (REPO / ".git").exists(),
        reason="needs the project's git checkout",
    ),
]


def dvc(clone: Path, *args: str) -> str:
    env = dict(
        os.environ,
        PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t.invalid",
        OMP_NUM_THREADS="1",
    )
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        [str(BIN / "dvc"), *args], cwd=clone, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, (
        f"dvc {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    clone = tmp_path_factory.mktemp("dvc") / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    params = tiny_params(Path("."))  # paths relative to the clone, as dvc.yaml's
    params["validate"]["report_dir"] = "data/validation"
    params["simulator_check"]["report_dir"] = "data/simulator_check"
    params["train"] |= {"estimator": "slca", "baseline": "grpo", "experiment": "slca"}
    (clone / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    git_env = dict(os.environ, GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t.invalid")
    commit = ["git", "-C", str(clone), "commit", "-qam", "tiny", "--author", "t <t@t.invalid>"]
    subprocess.run(commit, check=True, env=git_env)
    dvc(clone, "repro")
    return clone


def test_repro_runs_every_stage_and_both_arms_start_from_the_sft_model(clone):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{clone / 'mlflow/mlflow.db'}")
    for arm, estimator in (("baseline", "grpo"), ("method", "slca")):
        run = json.loads((clone / f"models/rl/{arm}/mlflow_run.json").read_text())
        params = client.get_run(run["run_id"]).data.params
        assert params["algorithm.advantage.estimator"] == estimator
        assert params["init_dir"] == "models/sft"
        metrics = json.loads((clone / f"reports/eval/{arm}.json").read_text())
        # the reported figures are those of the evaluation's own per-task lines
        lines = (clone / f"reports/eval/{arm}.tasks.jsonl").read_text().splitlines()
        tasks = [t for t in map(json.loads, lines) if t["set"] == "in_domain"]
        assert len(tasks) == metrics["in_domain/tasks"] > 0
        passed = [t["process"] >= 0.9 - 1e-9 for t in tasks]
        assert metrics["in_domain/success_at_0.9"] == pytest.approx(sum(passed) / len(tasks))
        process = sum(t["process"] for t in tasks) / len(tasks)
        assert metrics["in_domain/process"] == pytest.approx(process)
        rows = (clone / f"reports/train/{arm}.csv").read_text().splitlines()
        assert rows[0].startswith("step,reward/total") and len(rows) == 3  # 2 steps
    report = (clone / "reports/summary/report.md").read_text()
    for arm in ("| sft |", "| grpo |", "| slca |"):
        assert arm in report
    assert "Data and pipelines are up to date" in dvc(clone, "status")
    shown = json.loads(dvc(clone, "metrics", "show", "--json"))
    assert any("in_domain/process" in json.dumps(v) for v in shown.values())


def test_exp_run_with_the_estimator_shorthand_trains_the_method_arm_with_it(clone):
    dvc(clone, "exp", "run", "-S", "train.estimator=grpo")
    params = yaml.safe_load((clone / "params.yaml").read_text())
    assert params["train"]["estimator"] == "grpo"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{clone / 'mlflow/mlflow.db'}")
    for arm in ("method", "baseline"):
        run_id = json.loads((clone / f"models/rl/{arm}/mlflow_run.json").read_text())["run_id"]
        assert client.get_run(run_id).data.params["algorithm.advantage.estimator"] == "grpo"
    shown = dvc(clone, "exp", "show", "--json")
    assert '"estimator": "grpo"' in shown.replace("'", '"')
