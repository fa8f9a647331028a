"""Every entry point reads its section through the one loader: ``-S key=value``
overrides reach the section, and a bad key or value is one line on stderr naming the
file, the key and the constraint, with exit status 1."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

# (module, arguments before --params, section, a key/value its model refuses, the words
# of the refused constraint)
STAGES = [
    ("slca.data.prepare", [], "prepare", "synth.n_tasks=0", "greater than 0"),
    ("slca.data.validate", [], "validate", "max_examples=0", "greater than or equal to 1"),
    (
        "slca.simulator.check",
        [],
        "simulator_check",
        "max_error_rate=2",
        "less than or equal to 1",
    ),
    ("slca.training.stages", ["pretrain"], "pretrain", "epochs=0", "greater than or equal to 1"),
    (
        "slca.training.stages",
        ["base_model"],
        "base_model",
        "vocab_size=10",
        "greater than or equal to 300",
    ),
    ("slca.training.stages", ["sft"], "sft", "epochs=0", "greater than or equal to 1"),
    ("slca.training.stages", ["summary_rm"], "summary_rm", "lr=0", "greater than 0"),
    ("slca.training.stages", ["train"], "train", "steps=0", "greater than or equal to 1"),
    ("slca.eval.stages", [], "evaluate", "max_turns=0", "greater than or equal to 1"),
]
IDS = [f"{module}:{section}" for module, _, section, _, _ in STAGES]


def params_file(tmp_path, document) -> str:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("module, argv, section, bad, constraint", STAGES, ids=IDS)
def test_an_unknown_key_in_the_file_is_one_line_naming_file_key_and_rule(
    tmp_path, capsys, module, argv, section, bad, constraint
):
    main = importlib.import_module(module).main
    path = params_file(tmp_path, {section: {"nosuch": 1}})
    assert main([*argv, "--params", path]) == 1
    err = one_error_line(capsys)
    assert path in err and f"{section}.nosuch" in err and "Extra inputs are not permitted" in err


@pytest.mark.parametrize("module, argv, section, bad, constraint", STAGES, ids=IDS)
def test_a_bad_override_is_one_line_naming_file_key_and_rule(
    tmp_path, capsys, module, argv, section, bad, constraint
):
    main = importlib.import_module(module).main
    path = params_file(tmp_path, {section: {}})
    assert main([*argv, "--params", path, "-S", f"{section}.{bad}"]) == 1
    err = one_error_line(capsys)
    key = bad.partition("=")[0]
    assert path in err and f"{section}.{key}" in err and constraint in err, err


@pytest.mark.parametrize("module", ["slca.data.validate", "slca.simulator.check"])
def test_an_override_reaches_the_data_stages(tmp_path, capsys, module):
    # the stage reads the overridden directory, not the file's
    section = module.rpartition(".")[2].replace("check", "simulator_check")
    main = importlib.import_module(module).main
    path = params_file(tmp_path, {section: {"in_dir": str(tmp_path / "in-the-file")}})
    nowhere = tmp_path / "from-the-override"
    assert main(["--params", path, "-S", f"{section}.in_dir={nowhere}"]) == 1
    err = capsys.readouterr().err
    assert str(nowhere) in err and "in-the-file" not in err


def test_an_override_reaches_prepare(tmp_path):
    from slca.data.prepare import main

    out = tmp_path / "tasks"
    path = params_file(tmp_path, {"prepare": {"sources": ["synth"], "out_dir": str(out)}})
    assert main(["--params", path, "-S", "prepare.synth.n_tasks=7"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert sum(manifest["totals"].values()) == 7


def test_an_override_reaches_the_training_and_evaluation_stages(tmp_path, capsys):
    from slca.eval.stages import main as evaluate
    from slca.training.stages import main as stage

    path = params_file(tmp_path, {})
    assert stage(["train", "--params", path, "-S", "train.tracking_dir=/dev/null/x"]) == 1
    assert "/dev/null/x" in one_error_line(capsys)
    nowhere = tmp_path / "no-model"
    assert evaluate(["--params", path, "-S", f"evaluate.model_dir={nowhere}"]) == 1
    assert str(nowhere) in capsys.readouterr().err


@pytest.fixture()
def runner(monkeypatch, tmp_path):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    return CliRunner()


@pytest.mark.parametrize(
    "command, override, message",
    [
        (["data"], "prepare.synth.nosuch=1", "prepare.synth.nosuch: Extra inputs"),
        (["data"], "validate.max_examples=0", "validate.max_examples: Input should be"),
        (["train"], "train.nosuch=1", "train.nosuch: Extra inputs"),
        (["eval", "--model", "x=."], "evaluate.nosuch=1", "evaluate.nosuch: Extra inputs"),
    ],
)
def test_the_slca_command_reports_a_bad_setting_in_one_line(
    runner, tmp_path, command, override, message
):
    from slca_pipeline.cli import app

    path = params_file(tmp_path, {})
    result = runner.invoke(app, [*command, "--params", path, "-S", override])
    assert result.exit_code == 1, result.output
    error = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and path in error[0] and message in error[0], result.output
    assert "Traceback" not in result.output


def test_the_data_sections_load_without_torch():
    # the data stages run where torch is not installed (DESIGN: the data extra)
    code = (
        "import sys\n"
        "import slca.config.data, slca.config.simulator, slca.config.rewards\n"
        "import slca.data.prepare, slca.data.validate\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_slca_run_reports_a_bad_override_in_one_line_before_any_step(runner, tmp_path):
    """Checked before the flow, so before Prefect's server starts (it timed out starting
    under CI's load once, where the override alone was wrong)."""
    from slca_pipeline.cli import app

    tasks = tmp_path / "tasks"
    path = params_file(tmp_path, {"prepare": {"out_dir": str(tasks)}})
    result = runner.invoke(app, ["run", "--params", path, "-S", "sft.epochs=0"])
    assert result.exit_code == 1, result.output
    error = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and path in error[0], result.output
    assert "sft.epochs: Input should be greater than or equal to 1" in error[0]
    assert not tasks.exists()  # no step ran
