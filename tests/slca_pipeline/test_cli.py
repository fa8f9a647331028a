"""The `slca` command: its commands, and one-line errors that name the key."""

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from slca.config import ConfigError
from slca_pipeline.cli import app


@pytest.fixture()
def runner(monkeypatch, tmp_path):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    return CliRunner()


COMMANDS = {"run", "data", "pretrain", "train", "eval", "report", "ui"}


def test_the_commands_are_exactly_the_documented_ones(runner):
    group = typer.main.get_command(app)
    assert set(group.commands) == COMMANDS
    for name in COMMANDS:  # each answers its own --help, under its own name
        result = runner.invoke(app, [name, "--help"], prog_name="slca")
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[1].strip().startswith(f"Usage: slca {name} ")
    listed = runner.invoke(app, ["--help"]).output
    section = listed[listed.index("Commands") :]
    rows = [line.strip("│ ").split()[0] for line in section.splitlines()[1:] if "│" in line]
    assert set(rows) >= COMMANDS
    assert runner.invoke(app, ["nosuch"]).exit_code == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["train", "-S", "train.steps=0"],
            "train.steps: Input should be greater than or equal to 1",
        ),
        (["train", "-S", "train.steps"], "expected key=value"),
        (["train", "--estimator", "ppo"], "unknown estimator 'ppo'"),
        (["train", "--params", "nowhere.yaml"], "nowhere.yaml is not a file"),
        (["eval", "--model", "sft"], "expected NAME=DIR"),
        (["eval", "--model", "x=/nowhere"], "models.x: /nowhere is not a model directory"),
        (["eval", "--model", "x=.", "-S", "evaluate.max_turns=0"], "evaluate.max_turns"),
        (["report", "--tracking-dir", "/nowhere"], "no MLflow store at /nowhere"),
    ],
)
def test_bad_settings_fail_in_one_line_before_any_work(runner, args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output
    assert "hint:" in result.output


def test_debug_shows_the_exception(runner):
    result = runner.invoke(app, ["--debug", "train", "-S", "train.steps=0"])
    assert result.exit_code != 0 and isinstance(result.exception, ConfigError)


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--preset", "gpu-9x-900b"], "unknown preset 'gpu-9x-900b'; known: cpu-smollm2"),
        (["data", "--preset", "gpu-9x-900b"], "unknown preset 'gpu-9x-900b'"),
        (
            ["train", "--preset", "gpu-8x-7b", "-S", "train.engine.engine=torch"],
            "train.engine: zero_stage applies to engine 'deepspeed' only",
        ),
        (
            ["eval", "--model", "x=.", "--preset", "gpu-1x-1b", "-S", "evaluate.max_turns=0"],
            "evaluate.max_turns",
        ),
    ],
)
def test_a_bad_preset_or_combination_fails_in_one_line_before_any_work(runner, args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    error = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and message in error[0], result.output
    assert "Traceback" not in result.output and "hint:" in result.output


def test_a_preset_reaches_the_flow_under_the_overrides(runner, monkeypatch):
    import slca_pipeline.flows.train as train_flows

    seen = {}

    def fake_flow(**kwargs):
        seen.update(kwargs)
        return "run-1"

    monkeypatch.setattr(train_flows, "train", fake_flow)
    args = ["train", "--preset", "gpu-1x-1b", "-S", "train.engine.optim.lr=0.000003"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    # the flow runs on the document the command read (the file read once), in which
    # the preset is applied first and -S last
    train = seen["document"]["train"]
    assert "overrides" not in seen
    assert train["engine"]["optim"]["lr"] == 3e-6  # -S wins over the preset's 1e-6
    assert train["rollout"]["engine"] == "vllm"  # the preset's


def test_train_and_eval_tasks_read_the_users_file_as_run_tasks_prepared_it(runner, monkeypatch):
    """After `slca run --tasks FILE`, a `slca train` without it trained on the built-in
    tasks from an SFT of the user's; `--tasks` gives both commands the same sources."""
    import slca_pipeline.flows.evaluate as evaluate_flows
    import slca_pipeline.flows.train as train_flows

    seen = {}
    monkeypatch.setattr(train_flows, "train", lambda **kw: seen.setdefault("train", kw) and "r")
    monkeypatch.setattr(
        evaluate_flows, "evaluate", lambda **kw: seen.setdefault("eval", kw) and "report.md"
    )
    mine = ["--tasks", "data/raw/mine.v2.jsonl"]
    assert runner.invoke(app, ["train", *mine]).exit_code == 0
    assert runner.invoke(app, ["eval", "--model", "sft=.", *mine]).exit_code == 0
    assert seen["train"]["document"]["train"]["sources"] == ["mine"]
    assert seen["eval"]["document"]["evaluate"]["in_domain"]["sources"] == ["mine"]


def test_run_tasks_trains_and_evaluates_on_the_users_file_under_the_overrides(
    runner, monkeypatch, tmp_path
):
    import slca_pipeline.flows.pipeline as pipeline_flows

    seen = {}

    def fake_pipeline(**kwargs):
        seen.update(kwargs)
        (tmp_path / "report.md").write_text("table")
        return {"report": str(tmp_path / "report.md")}

    monkeypatch.setattr(pipeline_flows, "pipeline", fake_pipeline)
    args = ["run", "--tasks", "data/raw/mine.v2.jsonl", "-S", "train.sources=[mine, synth]"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    document = seen["document"]  # params.yaml read once, by the command, overrides applied
    assert "overrides" not in seen
    assert document["prepare"]["imports"] == [
        {"name": "mine", "path": "data/raw/mine.v2.jsonl", "format": "auto", "split": "auto"}
    ]
    sources = document["sft"]["sources"], document["evaluate"]["in_domain"]["sources"]
    assert sources == (["mine"], ["mine"])
    assert document["simulator_check"]["sources"] == ["mine"]  # the tools the run calls
    assert document["train"]["sources"] == ["mine", "synth"]  # -S wins


def test_data_import_prints_the_report_line_and_a_bad_path_in_one_line(runner, tmp_path):
    fixture = Path(__file__).parents[1] / "fixtures/imports/openai/tasks.jsonl"
    result = runner.invoke(app, ["data", "import", str(fixture), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert f"{fixture}: openai: 17 rows, 5 imported (6 tasks), 12 rejected" in result.output
    assert (tmp_path / "o" / "rejects.jsonl").exists()
    missing = runner.invoke(app, ["data", "import", str(tmp_path / "x.jsonl"), "--out", "o"])
    assert missing.exit_code == 1
    assert f"error: {tmp_path / 'x.jsonl'}: no such file or directory" in missing.output


def test_data_import_of_no_usable_row_exits_2_and_still_writes_why(runner, tmp_path):
    rows = tmp_path / "bad.jsonl"
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]}
    rows.write_text("".join(json.dumps({**row, "tools": []}) + "\n" for _ in range(2)))
    out = tmp_path / "o"
    result = runner.invoke(app, ["data", "import", str(rows), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"{rows}: openai: 2 rows, 0 imported (0 tasks), 2 rejected: no_tools (2)" in (
        result.output
    )
    assert f"error: no row was imported; {out}/rejects.jsonl says why" in result.output
    assert "--format" in result.output and "Traceback" not in result.output
    report = json.loads((out / "report.json").read_text())
    assert (report["rows"], report["imported"], report["rejected"]) == (2, 0, 2)
    assert [json.loads(line)["reason"] for line in (out / "rejects.jsonl").open()] == [
        "no_tools",
        "no_tools",
    ]


@pytest.mark.parametrize("split", ["auto", "val", "test"])
def test_data_import_split_is_train_or_eval_and_says_where_auto_lives(runner, tmp_path, split):
    fixture = Path(__file__).parents[1] / "fixtures/imports/openai/tasks.jsonl"
    args = ["data", "import", str(fixture), "--out", str(tmp_path / "o"), "--split", split]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert f"--split '{split}': expected train or eval" in result.output
    assert "prepare.imports with split: auto" in result.output
    assert not (tmp_path / "o").exists()
    ok = runner.invoke(app, [*args[:-1], "eval", "--name", "mine"])
    assert ok.exit_code == 0, ok.output
    table = pq.read_table(tmp_path / "o" / "tasks.parquet", columns=["id", "split"]).to_pylist()
    assert table and all(r["split"] == "eval" and r["id"].startswith("mine-") for r in table)


def test_data_import_options_are_the_documented_ones():
    command = typer.main.get_command(app).commands["data"].commands["import"]
    options = {o for p in command.params for o in p.opts if o.startswith("--")} - {"--help"}
    docs = Path(__file__).parents[2] / "docs" / "reference" / "cli.md"
    (row,) = [line for line in docs.read_text().splitlines() if "`slca data import" in line]
    assert (
        set(re.findall(r"--[a-z][a-z-]*", row))
        == options
        == {
            "--out",
            "--format",
            "--name",
            "--split",
        }
    )


def test_pretrain_refuses_a_leaking_corpus_or_missing_heldout_data_in_one_line(runner, tmp_path):
    from slca.config.data import PrepareParams
    from slca.data import io
    from slca.data.prepare import prepare

    tasks = tmp_path / "tasks"
    prepare(PrepareParams(sources=["synth"], synth={"n_tasks": 20}, out_dir=str(tasks)))
    corpus = tmp_path / "corpus.parquet"  # the val split's tasks among the train split's
    leaking = io.read_dataset(tasks, ["train", "val"])
    io.write_parquet(io.records_table(leaking), corpus)
    val = len(io.read_dataset(tasks, ["val"]))
    params = tmp_path / "params.yaml"
    params.write_text("pretrain: {epochs: 1}\n")
    out = tmp_path / "base"
    args = ["pretrain", "--params", str(params), "-S", f"pretrain.out_dir={out}"]
    for overrides, message in (
        (
            [f"pretrain.heldout_dir={tasks}", f"pretrain.corpus={corpus}"],
            f"pretrain: {corpus}: {val} of {len(leaking)} tasks hold a user message of the",
        ),
        (
            [f"pretrain.heldout_dir={tmp_path / 'nowhere'}"],
            f"no val or test split in {tmp_path / 'nowhere'} (run prepare first)",
        ),
        (["pretrain.max_weight_mb=0.5"], "over pretrain.max_weight_mb=0.5"),
    ):
        result = runner.invoke(app, [*args, *[x for o in overrides for x in ("-S", o)]])
        assert result.exit_code == 1, result.output
        error = [line for line in result.output.splitlines() if line.startswith("error: ")]
        assert len(error) == 1 and message in error[0], result.output
        assert "Traceback" not in result.output and "hint:" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    "command, module, name",
    [(["train"], "train", "train"), (["run"], "pipeline", "pipeline")],
)
def test_a_run_conflict_hints_at_its_own_fix_not_at_where_inputs_come_from(
    runner, monkeypatch, command, module, name
):
    import importlib

    from slca.training.identity import RunConflict

    def conflict(**kwargs):
        raise RunConflict("train.checkpoint_dir c holds checkpoints step_2 of another run")

    monkeypatch.setattr(importlib.import_module(f"slca_pipeline.flows.{module}"), name, conflict)
    result = runner.invoke(app, command)
    assert result.exit_code == 1
    hint = [line for line in result.output.splitlines() if line.startswith("hint: ")]
    assert len(hint) == 1 and "--overwrite" in hint[0] and "-S <the key named>=" in hint[0]
    assert "SFT checkpoint" not in result.output and "make data" not in result.output
