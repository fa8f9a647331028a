import json
from pathlib import Path

import pytest

from slca.config import load_section
from slca.config.data import PrepareParams, SplitParams
from slca.data import io
from slca.data.prepare import PrepareError, main, prepare
from slca.data.splits import assign_splits, request_key

NESTFUL_SPEC = [{"name": "Echo", "query_parameters": {"x": {"type": "number", "required": True}}}]


def _nestful_root(tmp_path, samples):
    d = tmp_path / "nestful" / "executable"
    d.mkdir(parents=True)
    (d / "executable-spec.json").write_text(json.dumps(NESTFUL_SPEC))
    (d / "executable-data.json").write_text(json.dumps(samples))
    return tmp_path / "nestful"


def _params(tmp_path, **kw):
    base = {"sources": ["synth"], "out_dir": str(tmp_path / "out"), "synth": {"n_tasks": 120}}
    base.update(kw)
    return PrepareParams.model_validate(base)


GOOD = {"input": "Echo 1", "output": [{"name": "Echo", "arguments": {"x": 1}, "label": "var1"}]}
BAD = {"input": "Echo two", "output": [{"name": "Echo", "arguments": {"x": "two"}}]}


def test_prepare_is_byte_for_byte_deterministic(tmp_path):
    m1 = prepare(_params(tmp_path / "a"))
    m2 = prepare(_params(tmp_path / "b"))
    assert m1 == m2
    for f in ("train.parquet", "val.parquet", "test.parquet", "manifest.json"):
        assert (tmp_path / "a/out" / f).read_bytes() == (tmp_path / "b/out" / f).read_bytes()


def test_manifest_counts_and_hashes_match_files(tmp_path):
    p = _params(tmp_path)
    m = prepare(p)
    out = tmp_path / "out"
    assert json.loads((out / "manifest.json").read_text()) == m
    assert sum(m["totals"].values()) == 120 and m["counts"]["synth"]["train"] > 60
    for s in ("train", "val", "test", "eval"):
        recs = io.read_records(out / f"{s}.parquet")
        assert len(recs) == m["totals"][s]
        assert io.content_hash(recs) == m["content_sha256"][s]
        assert io.file_sha256(out / f"{s}.parquet") == m["files"][f"{s}.parquet"]


def test_no_request_key_spans_two_splits(tmp_path):
    prepare(_params(tmp_path, synth={"n_tasks": 400}))
    where = {}
    for r in io.read_dataset(tmp_path / "out"):
        k = request_key(r.user_text())
        assert where.setdefault(k, r.split) == r.split, k


def test_near_duplicates_share_a_split_and_eval_collisions_are_dropped(make_record):
    from slca.data.record import TaskRecord

    a = TaskRecord.model_validate(
        make_record(
            id="a",
            messages=[{"role": "user", "content": "Hi! What's the weather in Paris? Thanks!"}],
        )
    )
    b = TaskRecord.model_validate(
        make_record(id="b", messages=[{"role": "user", "content": "what's the weather in paris"}])
    )
    c = TaskRecord.model_validate(
        make_record(id="c", messages=[{"role": "user", "content": "What's the weather in Lyon?"}])
    )
    e = TaskRecord.model_validate(
        make_record(
            id="e",
            split="eval",
            eval_only=True,
            messages=[{"role": "user", "content": "What's the weather in Lyon??"}],
        )
    )
    assert request_key(a.user_text()) == request_key(b.user_text())
    for seed in range(20):
        recs, dropped = assign_splits([a, b, c], [e], seed, SplitParams())
        by_id = {r.id: r.split for r in recs}
        assert by_id["a"] == by_id["b"] and by_id["e"] == "eval"
        assert [d.id for d, _ in dropped] == ["c"]


def test_malformed_record_stops_with_source_record_field(tmp_path):
    p = _params(
        tmp_path, sources=["nestful"], nestful={"subsets": ["executable"]}, skip_invalid=False
    )
    with pytest.raises(PrepareError) as e:
        prepare(p, roots={"nestful": _nestful_root(tmp_path, [GOOD, BAD])})
    msg = str(e.value)
    assert msg.startswith("nestful: record executable/executable-data.json [1]")
    assert "field gold[0][0].arguments.x" in msg
    assert not (tmp_path / "out").exists()  # nothing written


def test_skip_invalid_quarantines_and_counts(tmp_path):
    p = _params(
        tmp_path, sources=["nestful"], nestful={"subsets": ["executable"]}, skip_invalid=True
    )
    m = prepare(p, roots={"nestful": _nestful_root(tmp_path, [GOOD, BAD, GOOD])})
    rejects = [json.loads(x) for x in (tmp_path / "out/rejects.jsonl").read_text().splitlines()]
    assert m["rejected"] == {"nestful": 1}
    assert rejects == [
        {
            "source": "nestful",
            "record": "executable/executable-data.json [1] (id nestful-executable-0001)",
            "field": "gold[0][0].arguments.x",
            "reason": rejects[0]["reason"],
        }
    ]
    assert "'two' is not of type 'number'" in rejects[0]["reason"]
    # both GOOD samples are kept; their text is identical, so they share one split
    assert sum(m["totals"].values()) == 2 and 2 in m["totals"].values()


def test_failed_run_leaves_previous_output_intact(tmp_path):
    prepare(_params(tmp_path))
    before = (tmp_path / "out/manifest.json").read_bytes()
    p = _params(
        tmp_path,
        sources=["synth", "nestful"],
        nestful={"subsets": ["executable"]},
        skip_invalid=False,
    )
    with pytest.raises(PrepareError):
        prepare(p, roots={"nestful": _nestful_root(tmp_path, [BAD])})
    assert (tmp_path / "out/manifest.json").read_bytes() == before
    assert [x.name for x in tmp_path.iterdir() if x.name.startswith(".out")] == []


def test_train_builder_refuses_eval_only(tmp_path, make_record):
    from slca.data.record import TaskRecord

    ok = TaskRecord.model_validate(make_record())
    ev = TaskRecord.model_validate(make_record(id="e", split="eval", eval_only=True))
    assert io.build_train_set([ok]) == [ok]
    with pytest.raises(ValueError, match="refusing to train"):
        io.build_train_set([ok, ev])
    sneaky = ev.model_copy(update={"split": "train"})  # bypasses validation
    with pytest.raises(ValueError, match=r"\['e'\]"):
        io.build_train_set([sneaky])


def test_corrupt_parquet_row_error_names_file_row_and_field(tmp_path, make_record):
    from slca.data.record import TaskRecord

    t = io.records_table([TaskRecord.model_validate(make_record())])
    rows = t.to_pylist()
    rows[0]["split"] = "dev"
    path = tmp_path / "x.parquet"
    io.write_parquet(type(t).from_pylist(rows, schema=io.SCHEMA), path)
    with pytest.raises(ValueError, match=r"(?s)x.parquet: row 0 \(id=.t-1.\).*split"):
        io.read_records(path)


def test_cli_and_params(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(
        f"prepare:\n  sources: [synth]\n  out_dir: {tmp_path / 'o'}\n"
        f"  synth: {{n_tasks: 10}}\ntrain: {{lr: 1}}\n"
    )
    assert load_section(params, "prepare", PrepareParams).synth.n_tasks == 10
    assert main(["--params", str(params)]) == 0
    assert (tmp_path / "o/manifest.json").exists()
    params.write_text("prepare:\n  sedd: 3\n")
    assert main(["--params", str(params)]) == 1


OPENAI_FIXTURE = Path(__file__).parents[1] / "fixtures" / "imports" / "openai" / "tasks.jsonl"
GOOD_OPENAI_ROWS = OPENAI_FIXTURE.read_text().splitlines()[:5]  # 6 tasks, no reject


def _many(copies):
    """``copies`` x the good rows, each copy's requests made distinct (own split key)."""
    out = []
    for i in range(copies):
        for line in GOOD_OPENAI_ROWS:
            row = json.loads(line)
            messages = row["messages"]
            turns = json.loads(messages) if isinstance(messages, str) else messages
            first = next(m for m in turns if m["role"] == "user")
            first["content"] += f" (request {i})"
            row["messages"] = turns
            out.append(json.dumps(row))
    return out


def _openai_file(tmp_path, rows, name="mine.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(rows) + "\n")
    return str(path)


@pytest.mark.parametrize("policy", ["auto", "train", "eval"])
def test_imports_join_the_dataset_under_their_split_policy(tmp_path, policy):
    path = _openai_file(tmp_path, _many(20))  # 100 rows, 120 tasks
    m = prepare(
        _params(
            tmp_path, imports=[{"name": "mine", "path": path, "format": "openai", "split": policy}]
        )
    )
    records = [r for r in io.read_dataset(tmp_path / "out") if r.source == "mine"]
    assert len(records) == 120 and m["imports"]["mine"]["tasks"] == 120
    assert m["imports"]["mine"]["rejected"] == 0 and "seconds" not in m["imports"]["mine"]
    splits = {r.split for r in records}
    if policy == "auto":
        assert splits == {"train", "val", "test"}
        # a conversation's tasks (the follow-up holds the first answer) share a split
        by_row = {}
        for r in records:
            row = r.id.rsplit("-", 1)[0]
            assert by_row.setdefault(row, r.split) == r.split
    else:
        assert splits == {policy}
        assert all(r.eval_only == (policy == "eval") for r in records)
    assert sum(m["counts"]["mine"].values()) == 120


def test_rejected_rows_are_quarantined_and_counted(tmp_path):
    rows = _many(20) + ['{"messages": "[", "tools": []}']  # 1 of 101 rows
    path = _openai_file(tmp_path, rows)
    m = prepare(_params(tmp_path, imports=[{"name": "mine", "path": path}]))
    assert m["imports"]["mine"]["rejected_by_reason"] == {"bad_json": 1}
    assert m["rejected"]["mine"] == 1
    lines = [json.loads(x) for x in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    mine = [x for x in lines if x["source"] == "mine"]
    assert mine == [
        {
            "source": "mine",
            "record": f"{path} row 101",
            "field": "messages",
            "reason": "bad_json: Expecting value (column 2)",
        }
    ]


def test_too_many_rejects_stop_prepare_naming_the_file_and_reasons(tmp_path):
    path = _openai_file(tmp_path, OPENAI_FIXTURE.read_text().splitlines())  # 12 of 17 bad
    out = tmp_path / "out"
    with pytest.raises(PrepareError) as err:
        prepare(_params(tmp_path, imports=[{"name": "mine", "path": path}]))
    text = str(err.value)
    assert path in text and "12 of 17 rows rejected" in text and "bad_json (2)" in text
    assert "max_reject_frac 0.05" in text and not out.exists()
    m = prepare(_params(tmp_path, imports=[{"name": "mine", "path": path}], max_reject_frac=0.75))
    assert m["imports"]["mine"]["rejected"] == 12


@pytest.mark.parametrize(
    "imports, message",
    [
        ([{"name": "synth", "path": "x.jsonl"}], "built-in source's name"),
        ([{"name": "a", "path": "x"}, {"name": "a", "path": "y"}], "given twice"),
        ([{"name": "a b", "path": "x"}], "should match pattern"),
        ([{"name": "a", "path": "x", "format": "alpaca"}], "format"),
    ],
)
def test_import_settings_are_checked_at_load(tmp_path, imports, message):
    with pytest.raises(ValueError, match=message):
        _params(tmp_path, imports=imports)


def test_an_imports_only_dataset_and_an_empty_one(tmp_path):
    path = _openai_file(tmp_path, _many(20))
    m = prepare(_params(tmp_path, sources=[], imports=[{"name": "mine", "path": path}]))
    assert list(m["counts"]) == ["mine"]
    with pytest.raises(ValueError, match="nothing to prepare"):
        _params(tmp_path, sources=[])


def test_a_missing_import_file_fails_the_stage_in_one_line(tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text(
        f"prepare:\n  sources: [synth]\n  out_dir: {tmp_path / 'o'}\n  synth: {{n_tasks: 10}}\n"
        f"  imports: [{{name: mine, path: {tmp_path / 'nope.jsonl'}}}]\n"
    )
    assert main(["--params", str(params)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"prepare failed: {tmp_path / 'nope.jsonl'}: no such file or directory"
