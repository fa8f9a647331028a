import json

import pytest

pytest.importorskip("great_expectations", reason="great-expectations is in the data extra")

from slca.config.data import PrepareParams, SynthParams  # noqa: E402
from slca.config.simulator import SimulatorCheckParams  # noqa: E402
from slca.data import ge  # noqa: E402
from slca.data.prepare import prepare  # noqa: E402
from slca.data.synth import generate  # noqa: E402
from slca.simulator import Simulator  # noqa: E402
from slca.simulator.check import SUITE, build_suite, main, resolve_references, simulate_gold_calls


def test_references_resolve_through_keys_and_indices_or_not_at_all():
    results = {"var1": {"hotels": [{"id": "H7"}, {"id": "H9"}], "n": 2}}
    assert resolve_references({"h": "$var1.hotels.1.id$", "x": 3}, results) == {"h": "H9", "x": 3}
    assert resolve_references({"all": "$var1$"}, results) == {"all": results["var1"]}
    assert resolve_references({"h": "$var1.hotels.5.id$"}, results) is None
    assert resolve_references({"h": "$var2.id$"}, results) is None
    assert resolve_references({"note": "costs $5 or $6"}, results) == {"note": "costs $5 or $6"}


@pytest.fixture(scope="module")
def table():
    records = generate(SynthParams(n_tasks=40), seed=2)
    return simulate_gold_calls(records, Simulator(seed=1))


def test_every_gold_call_becomes_one_simulated_row_without_errors(table):
    records = generate(SynthParams(n_tasks=40), seed=2)
    assert len(table) == sum(r.n_calls for r in records)
    assert table["simulated"].all() and table["error_code"].isna().all()
    assert table["id"].is_unique


def test_clean_responses_pass_the_suite(table, tmp_path):
    ok, failures, _ = ge.run_suite(table, build_suite(0.0), name=SUITE, report_dir=tmp_path / "r")
    assert ok and failures == []
    assert (tmp_path / "r/data_docs/index.html").exists()


def test_planted_invalid_empty_and_error_responses_are_caught_by_id(table):
    df = table.copy()
    with_schema = df.index[df["response_schema"].notna()]
    bad_schema, empty, error = with_schema[0], with_schema[1], with_schema[2]
    response = json.loads(df.at[bad_schema, "response"])
    response[next(iter(response))] = {"unexpected": "shape"}
    df.at[bad_schema, "response"] = json.dumps(response)
    df.at[empty, "response"] = "{}"
    df.at[error, "response"] = json.dumps({"error": {"code": "simulator_failure", "message": "x"}})
    df.at[error, "error_code"] = "simulator_failure"
    ok, failures, _ = ge.run_suite(df, build_suite(0.0), name=SUITE)
    by_type = {f.split(" ", 1)[0]: f for f in failures}
    assert not ok
    assert df.at[bad_schema, "id"] in by_type["expect_simulator_responses_to_match_their_schema"]
    assert df.at[empty, "id"] in by_type["expect_simulator_responses_to_be_non_empty"]
    assert df.at[error, "id"] in by_type["expect_column_values_to_be_null"]
    # The same single error is tolerated under a configured error rate.
    df.at[bad_schema, "response"] = table.at[bad_schema, "response"]
    df.at[empty, "response"] = table.at[empty, "response"]
    ok, failures, _ = ge.run_suite(df, build_suite(0.05), name=SUITE)
    assert ok, failures


def test_cli_writes_the_report_and_fails_on_a_missing_split(tmp_path, capsys):
    data = tmp_path / "tasks"
    prepare(PrepareParams(sources=["synth"], out_dir=str(data), synth={"n_tasks": 50}))
    params = tmp_path / "params.yaml"
    params.write_text(f"simulator_check:\n  in_dir: {data}\n  report_dir: {tmp_path / 'r'}\n")
    assert main(["--params", str(params)]) == 0
    summary = json.loads((tmp_path / "r/summary.json").read_text())
    assert summary["simulated"] == summary["gold_calls"] > 0 and summary["error_rate"] == 0.0
    assert (tmp_path / "r/responses.parquet").exists()
    params.write_text(f"simulator_check:\n  in_dir: {data}\n  split: nope\n")
    assert main(["--params", str(params)]) == 1
    assert "no records in split 'nope'" in capsys.readouterr().err
    params.write_text("simulator_check:\n  max_error_rate: 2\n")
    assert main(["--params", str(params)]) == 1
    assert "max_error_rate" in capsys.readouterr().err


def test_params_reject_unknown_keys():
    with pytest.raises(ValueError):
        SimulatorCheckParams.model_validate({"backnd": "schema"})


def test_a_check_of_another_backend_than_training_uses_is_refused_at_load(tmp_path, capsys):
    from slca.simulator.check import load_params

    params = tmp_path / "params.yaml"
    params.write_text("simulator_check:\n  backend: llm\n  in_dir: /nonexistent\n")
    with pytest.raises(ValueError, match=r"simulator_check.backend: 'llm'.*'schema'"):
        load_params(params)
    # the stage stops there, before it reads any data
    assert main(["--params", str(params)]) == 1
    assert "train.simulator.backend 'schema'" in capsys.readouterr().err
    params.write_text("simulator_check:\n  backend: llm\ntrain:\n  simulator:\n    backend: llm\n")
    assert load_params(params).backend == "llm"
    params.write_text("train:\n  simulator:\n    backend: llm\n")  # the check's default
    with pytest.raises(ValueError, match=r"simulator_check.backend: 'schema'.*'llm'"):
        load_params(params)
    params.write_text("train:\n  simulator:\n    backend: remote\n")
    with pytest.raises(ValueError, match="train.simulator.backend"):
        load_params(params)


def test_a_gold_call_without_known_arguments_is_listed_not_simulated(tmp_path):
    from slca.data.record import Call

    record = generate(SynthParams(n_tasks=10, mix={"single": 1.0}), seed=2)[0]
    name = record.gold[0][0].name
    unknown = record.model_copy(
        update={"gold": [[Call(name=name, arguments={}, arguments_known=False)]]}
    )
    table = simulate_gold_calls([unknown], Simulator(seed=1))
    assert list(table["simulated"]) == [False] and table["error_code"].isna().all()
    ok, failures, _ = ge.run_suite(table, build_suite(0.0), name=SUITE, report_dir=tmp_path / "r")
    assert ok and failures == []


def test_the_check_can_be_held_to_some_sources(tmp_path, capsys):
    """``slca run --tasks`` checks the user's file alone (``simulator_check.sources``)."""
    from pathlib import Path

    from slca.data import io

    mine = Path(__file__).parents[1] / "fixtures/imports/openai/tasks.jsonl"
    data = tmp_path / "tasks"
    imports = [{"name": "mine", "path": str(mine), "split": "train"}]
    prepare(PrepareParams(sources=["synth"], imports=imports, out_dir=str(data), max_reject_frac=1))
    train = io.read_dataset(data, ["train"])
    ours = [r for r in train if r.source == "mine"]
    assert ours and len(ours) < len(train)
    params = tmp_path / "params.yaml"
    section = f"simulator_check:\n  in_dir: {data}\n  report_dir: {tmp_path / 'r'}\n"
    params.write_text(section + "  split: train\n  sources: [mine]\n")
    assert main(["--params", str(params)]) == 0
    summary = json.loads((tmp_path / "r/summary.json").read_text())
    assert (summary["tasks"], summary["sources"]) == (len(ours), ["mine"])
    params.write_text(section + "  split: train\n  sources: [theirs]\n")
    assert main(["--params", str(params)]) == 1
    assert "no records of sources ['theirs'] in split 'train'" in capsys.readouterr().err
