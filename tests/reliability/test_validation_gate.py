"""Issue 16, fault 7: validation gates training.

``train`` depends on validate's output in dvc.yaml (and the train flow validates
first); the Great Expectations suite refuses duplicate ids, missing or null required
fields, prompts without a user turn and splits without enough rows; training itself
refuses duplicate ids and invalid tool schemas; MLflow records the hash of the rows
trained on.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from slca.data import io

pytest.importorskip("great_expectations", reason="great-expectations is in the data extra")
mlflow = pytest.importorskip("mlflow")

REPO = Path(__file__).resolve().parents[2]


def test_dvc_train_stages_depend_on_validates_output():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    (validate_out,) = [
        next(iter(o)) if isinstance(o, dict) else o for o in stages["validate"]["outs"]
    ]
    assert validate_out in stages["train"]["do"]["deps"]


def test_dvc_runs_validate_before_either_train_arm(tmp_path):
    """``dvc repro train@method`` used to run prepare → base_model → sft → train, never
    validate; the stage graph DVC builds from dvc.yaml now has validate upstream."""
    import subprocess
    import sys

    dvc = str(Path(sys.executable).parent / "dvc")
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy2(REPO / name, tmp_path / name)
    run = dict(cwd=tmp_path, capture_output=True, text=True)
    subprocess.run([dvc, "init", "--no-scm", "-q"], check=True, **run)
    for arm in ("train@method", "train@baseline"):
        dag = subprocess.run([dvc, "dag", "--dot", arm], **run)
        assert dag.returncode == 0, dag.stderr[-2000:]
        assert f'"validate" -> "{arm}"' in dag.stdout, dag.stdout


def _write(frame, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for split, rows in frame.groupby("split"):
        table = pa.Table.from_pandas(
            rows.drop(columns=["request_key"], errors="ignore"),
            schema=io.SCHEMA,
            preserve_index=False,
        )
        pq.write_table(table, directory / f"{split}.parquet")
    return directory


@pytest.fixture(scope="module")
def frame(workspace):
    from slca.data.validate import load_frame

    return load_frame(workspace / "data/tasks")


def _failures(frame, **min_rows):
    from slca.data.validate import run_suite

    ok, failures, _ = run_suite(frame, None, min_rows=min_rows or None)
    return ok, "\n".join(failures)


def test_the_suite_passes_the_prepared_data(frame):
    ok, failures = _failures(frame.copy())
    assert ok, failures


def test_an_empty_or_missing_train_split_fails_validation(frame):
    ok, failures = _failures(frame[frame["split"] != "train"].copy())
    assert not ok and "expect_table_row_count_to_be_between" in failures
    assert 'split=="train"' in failures and "observed 0" in failures
    ok, failures = _failures(frame.copy(), train=10_000)
    assert not ok and "observed" in failures


@pytest.mark.parametrize("column", ["messages", "source", "tools", "gold", "domain"])
def test_a_null_required_field_fails_validation_naming_the_record(frame, column):
    df = frame.copy()
    df.at[3, column] = None
    ok, failures = _failures(df)
    assert not ok
    line = next(f for f in failures.splitlines() if f"'column': '{column}'" in f)
    assert line.startswith("expect_column_values_to_not_be_null") and df.at[3, "id"] in line


def test_a_prompt_without_a_user_turn_fails_validation(frame):
    df = frame.copy()
    df.at[5, "messages"] = json.dumps([{"role": "system", "content": "hello"}])
    df.at[6, "messages"] = "[]"
    ok, failures = _failures(df)
    assert not ok
    line = next(f for f in failures.splitlines() if "hold_a_user_turn" in f)
    assert df.at[5, "id"] in line and df.at[6, "id"] in line


def test_duplicated_ids_fail_validation_and_training(frame, config, tmp_path):
    import pandas as pd

    from slca.training.session import run_train

    doubled = pd.concat([frame, frame[frame["split"] == "train"]], ignore_index=True)
    ok, failures = _failures(doubled)
    assert not ok and "expect_column_values_to_be_unique" in failures
    data = _write(doubled, tmp_path / "dup")
    with pytest.raises(ValueError, match="appear more than once"):
        run_train(config(in_dir=str(data)))
    assert not (tmp_path / "mlflow").exists() or not list((tmp_path / "ckpt").rglob("step_*"))


def test_an_invalid_tool_schema_fails_validation_and_training(frame, config, tmp_path):
    from slca.training.session import run_train

    df = frame.copy()
    row = df.index[df["split"] == "train"][0]
    tools = json.loads(df.at[row, "tools"])
    tools[0]["parameters"] = {"type": "object", "properties": {"x": {"type": "sometimes"}}}
    df.at[row, "tools"] = json.dumps(tools)
    ok, failures = _failures(df)
    assert not ok and df.at[row, "id"] in failures
    with pytest.raises(ValueError, match=rf"task '{df.at[row, 'id']}': tools\[0\].parameters"):
        run_train(config(in_dir=str(_write(df, tmp_path / "bad"))))


def test_mlflow_records_the_hash_of_the_rows_trained_on(workspace, config, tmp_path):
    from slca.modeling import load_tokenizer
    from slca.rollout.chat import ChatRenderer
    from slca.training.identity import rows_hash
    from slca.training.session import data_hashes, training_session

    all_train = io.load_train_set(workspace / "data/tasks")
    tokenizer = load_tokenizer(workspace / "models/sft")
    lengths = sorted(
        len(
            ChatRenderer(tokenizer, [t.model_dump() for t in task.tools]).prompt_ids(
                [{"role": m.role, "content": m.content} for m in task.messages]
            )
        )
        for task in all_train
    )
    budget = lengths[len(lengths) // 2]  # about half the prompts fit
    rollout = {"tasks_per_step": 2, "group_size": 2, "max_new_tokens": 16, "max_turns": 2}
    settings = config(rollout={**rollout, "max_total_tokens": budget + 16})
    with training_session(settings, data_hashes=data_hashes(settings.in_dir)) as trainer:
        trainer.run()
        trained = trainer.sampler.tasks
        run_id = trainer.state.run_id
    assert 0 < len(trained) < len(all_train)  # the prompt budget left some out
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow/mlflow.db'}")
    params = client.get_run(run_id).data.params
    assert params["data_hash.tasks.train"] == rows_hash(trained)
    assert params["data_hash.tasks.train"] != rows_hash(all_train)
    manifest = json.loads((Path(settings.in_dir) / "manifest.json").read_text())
    assert params["data_hash.manifest.train"] == manifest["content_sha256"]["train"]
    # what the run read: the content hash of train.parquet as read (issue 36, item 4)
    read = io.content_hash(io.read_records(Path(settings.in_dir) / "train.parquet"))
    assert params["data_hash.read.train"] == read == manifest["content_sha256"]["train"]
