import json

import pytest

pytest.importorskip("great_expectations", reason="great-expectations is in the data extra")

from slca.config.data import PrepareParams  # noqa: E402
from slca.data.prepare import prepare  # noqa: E402
from slca.data.validate import load_frame, main, run_suite  # noqa: E402


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    out = tmp_path_factory.mktemp("v") / "out"
    prepare(PrepareParams(sources=["synth"], out_dir=str(out), synth={"n_tasks": 60}))
    return load_frame(out)


def test_clean_data_passes(frame, tmp_path):
    ok, failures, data = run_suite(frame.copy(), tmp_path / "report")
    assert ok and failures == []
    assert json.loads((tmp_path / "report/ge_results.json").read_text())["success"] is True
    assert (tmp_path / "report/data_docs/index.html").exists()


def _row_with_gold(df):
    return next(i for i in df.index if json.loads(df.at[i, "gold"]))


def test_each_planted_error_is_caught_with_its_record_id(frame):
    df = frame.copy()
    ids = list(df["id"])
    df.at[0, "id"] = ids[1]  # duplicate id
    i = _row_with_gold(df.iloc[2:])  # gold names an unknown tool
    g = json.loads(df.at[i, "gold"])
    g[0][0]["name"] = "no_such_tool"
    df.at[i, "gold"] = json.dumps(g)
    j = _row_with_gold(df.loc[i + 1 :])  # argument of the wrong type
    g = json.loads(df.at[j, "gold"])
    g[0][0]["arguments"] = {k: 12345 for k in g[0][0]["arguments"]}
    df.at[j, "gold"] = json.dumps(g)
    tools = json.loads(df.at[j + 1, "tools"])  # invalid JSON Schema
    tools[0]["response"] = {"type": "sometimes"}
    df.at[j + 1, "tools"] = json.dumps(tools)
    df.at[j + 2, "eval_only"] = True  # eval-only record in an in-domain split
    # the same request in two splits
    df.at[j + 3, "request_key"] = df.at[j + 4, "request_key"]
    df.at[j + 3, "split"] = "val" if df.at[j + 4, "split"] != "val" else "test"
    ok, failures, _ = run_suite(df, None)
    assert not ok
    text = "\n".join(failures)
    by_type = {f.split(" ", 1)[0]: f for f in failures}
    assert ids[1] in by_type["expect_column_values_to_be_unique"]
    assert df.at[i, "id"] in by_type["expect_gold_calls_to_match_tool_schemas"]
    assert df.at[j, "id"] in by_type["expect_gold_calls_to_match_tool_schemas"]
    assert df.at[j + 1, "id"] in by_type["expect_column_values_to_be_valid_tool_schemas"]
    assert df.at[j + 2, "id"] in by_type["expect_column_pair_values_to_be_in_set"]
    assert df.at[j + 3, "id"] in by_type["expect_request_keys_to_stay_in_one_split"]
    assert "could not be evaluated" not in text


def test_null_id_is_caught(frame):
    df = frame.copy()
    df.at[3, "id"] = None
    ok, failures, _ = run_suite(df, None)
    assert not ok and any(f.startswith("expect_column_values_to_not_be_null") for f in failures)


def test_cli_fails_naming_expectation(frame, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from slca.data import io

    d = tmp_path / "in"
    d.mkdir()
    df = frame.drop(columns=["request_key"]).copy()
    df.at[0, "id"] = df.at[1, "id"]
    pq.write_table(
        pa.Table.from_pandas(df, schema=io.SCHEMA, preserve_index=False), d / "train.parquet"
    )
    params = tmp_path / "params.yaml"
    params.write_text(f"validate:\n  in_dir: {d}\n  report_dir: {tmp_path / 'r'}\n")
    assert main(["--params", str(params)]) == 1
    err = capsys.readouterr().err
    assert "expect_column_values_to_be_unique" in err and str(df.at[1, "id"]) in err
    assert (tmp_path / "r/ge_results.json").exists()
