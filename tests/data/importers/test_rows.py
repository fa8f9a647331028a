"""Reading the containers users bring: JSONL, JSON, parquet, a datasets directory."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slca.data.importers import import_path
from slca.data.importers.rows import InputError, read_rows

FIXTURE = Path(__file__).parents[2] / "fixtures" / "imports" / "openai" / "tasks.jsonl"
GOOD = [json.loads(line) for line in FIXTURE.read_text().splitlines()[:5]]


def _flat(rows):
    # parquet and Arrow need one type per column: nested fields as JSON text, as many
    # real exports store them
    return [
        {
            "messages": json.dumps(r["messages"])
            if not isinstance(r["messages"], str)
            else r["messages"],
            "tools": json.dumps(r["tools"]) if not isinstance(r["tools"], str) else r["tools"],
        }
        for r in rows
    ]


def _gold(records):
    return [[[(c.name, c.arguments) for c in s] for s in r.gold] for r in records]


def test_every_container_gives_the_same_tasks(tmp_path):
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in GOOD))
    as_json = tmp_path / "t.json"
    as_json.write_text(json.dumps(GOOD))
    jsonl_named_json = tmp_path / "lines.json"
    jsonl_named_json.write_text(jsonl.read_text())
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(_flat(GOOD)), parquet, row_group_size=2)
    arrow_dir = tmp_path / "saved"
    arrow_dir.mkdir()
    table = pa.Table.from_pylist(_flat(GOOD))
    with pa.OSFile(str(arrow_dir / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=2):
                writer.write_batch(batch)
    (arrow_dir / "state.json").write_text(
        json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})
    )
    reference, _, _ = import_path(jsonl, "auto", "t")
    assert len(reference) == 6
    for path in (as_json, jsonl_named_json, parquet, arrow_dir):
        records, rejects, result = import_path(path, "auto", "t")
        assert (result.format, result.rows, result.rejected) == ("openai", 5, 0), path
        assert _gold(records) == _gold(reference), path
        assert [r.id for r in records] == [r.id for r in reference]


def test_parquet_is_read_in_batches(tmp_path, monkeypatch):
    from slca.data.importers import rows as rows_module

    monkeypatch.setattr(rows_module, "BATCH_ROWS", 2)
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(_flat(GOOD)), parquet)
    sizes = []
    batches = rows_module._batches

    def spy(stream):
        for batch in stream:
            sizes.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(rows_module, "_batches", lambda stream: batches(spy(stream)))
    assert [r.number for r in read_rows(parquet)] == [1, 2, 3, 4, 5]
    assert sizes == [2, 2, 1]


def _file(name, text):
    def make(directory):
        (directory / name).write_text(text)
        return directory / name

    return make


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.jsonl", "no such file or directory"),
        (_file("empty.jsonl", ""), "empty file"),
        (_file("blank.jsonl", "\n\n"), "holds no row"),
        (_file("x.txt", "hello"), "neither JSONL"),
        (lambda d: (d / "dir").mkdir() or d / "dir", "not one datasets.save_to_disk wrote"),
        (_file("other.jsonl", '{"a": 1}\n{"b": 2}\n'), "in none of the known formats"),
    ],
)
def test_an_unreadable_input_stops_with_one_line_naming_it(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(InputError) as err:
        import_path(path, "auto", "t")
    text = str(err.value)
    assert message in text and str(path) in text and "\n" not in text


def test_an_unknown_format_name_is_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD[0]) + "\n")
    with pytest.raises(InputError, match="unknown format 'alpaca'"):
        import_path(path, "alpaca", "t")


def test_a_dataset_dict_asks_for_one_split(tmp_path):
    (tmp_path / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    with pytest.raises(InputError, match=r"give one split's directory \(test, train\)"):
        import_path(tmp_path, "auto", "t")
