"""Issue 36, item 4: validated data cannot drift.

Training reads each split through :func:`slca.data.io.verified_split`: the content hash
of what it read must be the one ``manifest.json`` records (prepare wrote it, validation
checked it), else it refuses, naming the file and the command that rebuilds and
re-validates the data; the hash it records is the hash of what it read. Every training
entry point (``slca train``, the Prefect task, ``python -m slca.training.stages train``,
which DVC runs) goes through :func:`slca.training.session.training_session`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slca.config.data import PrepareParams
from slca.data import io
from slca.data.prepare import prepare

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    out = tmp_path_factory.mktemp("drift") / "tasks"
    prepare(PrepareParams(sources=["synth"], out_dir=str(out), synth={"n_tasks": 60}))
    return out


@pytest.fixture
def data(prepared, tmp_path):
    """A copy of the prepared data, manifest included, for a test to change."""
    out = tmp_path / "tasks"
    shutil.copytree(prepared, out)
    return out


def _manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


def copy_a_test_row_into_train(directory: Path) -> None:
    """The issue's edit: a test row appended to the train split."""
    train = io.read_rows(directory / "train.parquet")
    leaked = {**io.read_rows(directory / "test.parquet")[0], "split": "train"}
    table = pa.Table.from_pylist([*train, leaked], schema=io.SCHEMA)
    io.write_parquet(table, directory / "train.parquet")


def test_the_prepared_splits_read_as_the_manifest_records_them(prepared):
    manifest = _manifest(prepared)
    for split in ("train", "val", "test", "eval"):
        records, digest = io.verified_split(prepared, split)
        assert digest == manifest["content_sha256"][split]
        assert digest == io.content_hash(io.read_records(prepared / f"{split}.parquet"))


def test_a_changed_split_is_refused_naming_the_file_and_the_command(data):
    recorded = _manifest(data)["content_sha256"]["train"]
    copy_a_test_row_into_train(data)
    with pytest.raises(io.DataDrift) as err:
        io.load_train_set(data)
    message = str(err.value)
    assert message.startswith(f"{data / 'train.parquet'}: content sha256 ")
    assert f"but {data / 'manifest.json'} records {recorded[:12]}" in message
    assert "`slca data` (or `dvc repro validate`)" in message and "\n" not in message
    assert io.verified_split(data, "val")[1] == _manifest(data)["content_sha256"]["val"]


def test_a_deleted_split_is_refused(data):
    (data / "train.parquet").unlink()
    with pytest.raises(io.DataDrift, match=r"train.parquet: missing, but .*manifest.json records"):
        io.verified_split(data, "train")


def test_the_same_content_in_other_bytes_is_the_same_data(data):
    path = data / "train.parquet"
    rows = pq.read_table(path)
    pq.write_table(rows, path, compression="snappy")  # another encoder setup
    assert io.file_sha256(path) != _manifest(data)["files"]["train.parquet"]
    records, digest = io.verified_split(data, "train")
    assert digest == _manifest(data)["content_sha256"]["train"] == io.content_hash(records)


def test_a_directory_without_a_manifest_records_what_was_read(prepared, data):
    (data / "manifest.json").unlink()  # not prepared data: nothing claims it was validated
    copy_a_test_row_into_train(data)
    records, digest = io.verified_split(data, "train")
    assert digest == io.content_hash(io.read_records(data / "train.parquet"))
    assert digest != _manifest(prepared)["content_sha256"]["train"]  # what it read, not old


def _train_config(data: Path, tmp_path: Path) -> dict:
    return {
        "in_dir": str(data),
        "init_dir": str(tmp_path / "no-model"),  # never reached: the data is refused first
        "out_dir": str(tmp_path / "rl"),
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "tracking_dir": str(tmp_path / "mlflow"),
        "steps": 1,
    }


def test_the_training_session_refuses_drifted_data_before_anything_starts(data, tmp_path):
    from slca.config.train import TrainConfig
    from slca.training.session import run_train

    copy_a_test_row_into_train(data)
    config = TrainConfig.model_validate(_train_config(data, tmp_path))
    with pytest.raises(io.DataDrift, match="train.parquet: content sha256"):
        run_train(config, track=False)
    assert not list((tmp_path / "ckpt").glob("step_*")) and not (tmp_path / "rl").exists()


@pytest.mark.slow
def test_the_train_stage_command_refuses_drifted_data_in_one_line(data, tmp_path):
    copy_a_test_row_into_train(data)
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps({"train": _train_config(data, tmp_path)}))  # YAML reads JSON
    run = subprocess.run(
        [sys.executable, "-m", "slca.training.stages", "train", "--params", str(params)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 1, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("train failed: ")]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert f"{data / 'train.parquet'}: content sha256 " in lines[0]
    assert "rebuild and re-validate the data with `slca data`" in lines[0]
    assert not (tmp_path / "mlflow").exists() or not list((tmp_path / "mlflow").rglob("meta.yaml"))
