"""Reading the containers users bring: JSONL, JSON, parquet, a datasets directory."""

from __future__ import annotations

import gzip
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


WEATHER = {
    "name": "get_weather",
    "description": "Current weather of a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
        "required": ["city"],
    },
}
CONVERT = {
    "name": "convert",
    "description": "Convert an amount between currencies.",
    "parameters": {
        "type": "object",
        "properties": {"amount": {"type": "number"}, "src": {"type": "string"}},
        "required": ["amount", "src"],
    },
}


def _nested_row(tool, arguments, answer):
    return {
        "messages": [
            {"role": "user", "content": "Go."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": tool["name"], "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": answer},
        ],
        "tools": [{"type": "function", "function": tool}],
    }


NESTED = [
    _nested_row(WEATHER, {"city": "Oslo"}, "4 °C."),
    _nested_row(CONVERT, {"amount": 100, "src": "EUR"}, "108 USD."),
]


def _arrow_dir(directory, table):
    directory.mkdir()
    with pa.OSFile(str(directory / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    (directory / "state.json").write_text(
        json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})
    )
    return directory


def test_native_nested_tools_from_arrow_are_read_as_each_row_wrote_them(tmp_path):
    # pyarrow infers one struct type from both rows: each tool's schema (and each call's
    # arguments) gets the other's keys as nulls, as in a real HF parquet file
    table = pa.Table.from_pylist(NESTED)
    assert (
        table.to_pylist()[0]["tools"][0]["function"]["parameters"]["properties"]["amount"] is None
    )
    parquet = tmp_path / "nested.parquet"
    pq.write_table(table, parquet)
    for path in (parquet, _arrow_dir(tmp_path / "saved", table)):
        records, rejects, result = import_path(path, "auto", "t")
        assert (result.format, result.rows, result.imported) == ("openai", 2, 2), rejects
        assert [r.tools[0].model_dump(exclude_none=True) for r in records] == [WEATHER, CONVERT]
        assert _gold(records) == [
            [[("get_weather", {"city": "Oslo"})]],
            [[("convert", {"amount": 100, "src": "EUR"})]],
        ]
        assert [r.answer for r in records] == ["4 °C.", "108 USD."]


def test_nulls_in_a_json_row_are_the_users_and_stay(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"a": {"b": None, "c": [None]}}) + "\n")
    assert [r.data for r in read_rows(path)] == [{"a": {"b": None, "c": [None]}}]


@pytest.mark.parametrize("name", ["t.jsonl", "t.json", "t.txt"])
def test_a_utf8_byte_order_mark_is_read_past(tmp_path, name):
    path = tmp_path / name
    body = json.dumps(GOOD) if name == "t.json" else "".join(json.dumps(r) + "\n" for r in GOOD)
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    records, rejects, result = import_path(path, "auto", "t")
    assert (result.rows, result.imported, len(records)) == (5, 5, 6), rejects


@pytest.mark.parametrize("name", ["t.jsonl.gz", "t.json.gz"])
def test_gzipped_json_is_read(tmp_path, name):
    path = tmp_path / name
    body = json.dumps(GOOD) if ".json." in name else "".join(json.dumps(r) + "\n" for r in GOOD)
    path.write_bytes(gzip.compress(body.encode()))
    records, _, result = import_path(path, "auto", "t")
    assert (result.rows, result.imported, len(records)) == (5, 5, 6)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("t.jsonl", b"id,question\n1,Weather?\n", "not JSON Lines: none of its first 2 lines"),
        ("t.jsonl", b"[1, 2]\n3\n", "its first rows are JSON but not objects"),
        ("t.gz", gzip.compress(b"{}", mtime=0), "gzip-compressed; name it FILE.jsonl.gz"),
        ("t.jsonl.gz", b"not gzip at all", "not readable"),
    ],
)
def test_a_file_that_is_not_json_says_so(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        import_path(path, "auto", "t")
    text = str(err.value)
    assert message in text and str(path) in text and "\n" not in text
    assert "keys: []" not in text
