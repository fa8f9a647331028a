"""Issue 16, faults 8 and 12: settings that were accepted and should not be.

Booleans are not numbers, floats are finite, a YAML key appears once, a section name
is one the pipeline knows, in every entry point; every error is one line naming the
file, the key and the constraint, and a record error keeps the field's name.
"""

from __future__ import annotations

import pytest
import yaml

from slca.config import ConfigError, load_section
from slca.config.train import TrainConfig


def params_file(tmp_path, document):
    path = tmp_path / "params.yaml"
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document))
    return path


def one_line(exc) -> str:
    text = str(exc)
    assert "\n" not in text.strip(), text
    return text


# --- fault 12a: booleans as numbers ----------------------------------------------------


@pytest.mark.parametrize(
    "key, value",
    [
        ("train.steps", True),
        ("train.rollout.temperature", False),
        ("train.engine.optim.lr", True),
        ("train.algorithm.advantage.weights.tool", True),
    ],
)
def test_a_boolean_is_not_a_number(tmp_path, key, value):
    path = params_file(tmp_path, {"train": {}})
    with pytest.raises(ConfigError) as info:
        load_section(path, "train", TrainConfig, {key: value})
    message = one_line(info.value)
    assert str(path) in message and key in message and "boolean" in message


def test_a_boolean_where_a_boolean_belongs_is_fine(tmp_path):
    path = params_file(tmp_path, {"train": {"update": {"recompute_old_logprobs": False}}})
    assert load_section(path, "train", TrainConfig).update.recompute_old_logprobs is False


# --- fault 8: non-finite floats --------------------------------------------------------


@pytest.mark.parametrize(
    "key, text",
    [
        ("train.engine.optim.lr", ".inf"),
        ("train.rollout.temperature", ".inf"),
        ("train.algorithm.advantage.eps", ".inf"),
        ("train.algorithm.advantage.weights.tool", ".inf"),
        ("train.algorithm.loss.kl_coef", ".inf"),
        ("train.rewards.guard.penalty", ".nan"),
        ("train.rewards.guard.penalty", "-.inf"),
        ("train.engine.optim.lr", "inf"),  # a string pydantic would read as a float
    ],
)
def test_non_finite_floats_are_refused(tmp_path, key, text):
    from slca.config import parse_override

    path = params_file(tmp_path, {"train": {}})
    with pytest.raises(ConfigError) as info:
        load_section(path, "train", TrainConfig, dict([parse_override(f"{key}={text}")]))
    message = one_line(info.value)
    assert str(path) in message and key in message and "finite" in message


def test_the_stage_cli_refuses_an_infinite_learning_rate_in_one_line(tmp_path, capsys):
    from slca.training.stages import main

    path = params_file(tmp_path, {"train": {}})
    assert main(["train", "--params", str(path), "-S", "train.engine.optim.lr=.inf"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train.engine.optim.lr" in err and "finite" in err


# --- fault 12b: duplicate YAML keys ----------------------------------------------------


def test_a_duplicate_yaml_key_is_refused_naming_the_key_and_line(tmp_path):
    path = params_file(tmp_path, "train:\n  steps: 4\n  seed: 1\n  steps: 8\n")
    with pytest.raises(ConfigError) as info:
        load_section(path, "train", TrainConfig)
    message = one_line(info.value)
    assert str(path) in message and "duplicate key 'steps'" in message and "line 4" in message


def test_a_duplicate_section_is_refused(tmp_path):
    path = params_file(tmp_path, "train:\n  steps: 4\ntrain:\n  steps: 8\n")
    with pytest.raises(ConfigError, match="duplicate key 'train'"):
        load_section(path, "train", TrainConfig)


# --- fault 12c: unknown sections in every entry point -----------------------------------


@pytest.mark.parametrize(
    "module, argv",
    [
        ("slca.training.stages", ["train"]),
        ("slca.training.stages", ["sft"]),
        ("slca.training.stages", ["base_model"]),
        ("slca.training.stages", ["summary_rm"]),
        ("slca.eval.stages", []),
    ],
)
def test_stage_clis_refuse_an_override_of_an_unknown_section(tmp_path, capsys, module, argv):
    import importlib

    main = importlib.import_module(module).main
    path = params_file(tmp_path, {"train": {}})
    assert main([*argv, "--params", str(path), "-S", "trian.steps=1"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown section 'trian'" in err, err


@pytest.mark.parametrize(
    "module, argv",
    [
        ("slca.training.stages", ["train"]),
        ("slca.eval.stages", []),
        ("slca.data.prepare", []),
        ("slca.data.validate", []),
        ("slca.simulator.check", []),
    ],
)
def test_every_entry_point_refuses_an_unknown_section_in_the_file(tmp_path, capsys, module, argv):
    import importlib

    main = importlib.import_module(module).main
    path = params_file(tmp_path, {"trian": {"steps": 1}})
    assert main([*argv, "--params", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown section 'trian'" in err, err
    assert str(path) in err


def test_data_stage_params_errors_are_one_line_naming_the_key(tmp_path, capsys):
    from slca.data.prepare import main

    path = params_file(tmp_path, {"prepare": {"synth": {"n_tasks": True}}})
    assert main(["--params", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "prepare.synth.n_tasks" in err, err


# --- fault 12d: an unusable directory ---------------------------------------------------


def test_an_unusable_tracking_dir_is_one_line_naming_the_key(tmp_path, capsys):
    from slca.training.stages import main

    path = params_file(tmp_path, {"train": {"tracking_dir": "/dev/null/x"}})
    assert main(["train", "--params", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "train.tracking_dir" in err and "/dev/null/x" in err


# --- fault 12f: a record error keeps the field's name -----------------------------------


def test_a_record_error_names_the_field_in_one_line(tmp_path):
    from slca.data import io

    row = {
        "id": "r1",
        "source": "synth",
        "domain": "weather",
        "split": "train",
        "eval_only": False,
        "messages": "[]",
        "tools": "[]",
        "gold": "[]",
        "facts": "{}",
        "world": None,
    }
    import pyarrow as pa

    path = tmp_path / "train.parquet"
    io.write_parquet(pa.Table.from_pylist([row], schema=io.SCHEMA), path)
    with pytest.raises(ValueError) as info:
        io.read_records(path)
    message = one_line(info.value)
    assert "row 0 (id='r1')" in message and "messages" in message
    assert "validation error for TaskRecord" not in message
