"""Rows of a user's data file, read a batch at a time.

JSONL, parquet and a ``datasets.Dataset.save_to_disk`` directory are streamed (a 1 GB
file never needs 1 GB of memory); a ``.json`` file holds one JSON document (a list of
rows, or one row) and is read whole. A JSON or JSONL file may be gzipped (``.jsonl.gz``,
``.json.gz``) and may start with a UTF-8 byte-order mark. Each row comes with its
number (1-based: the line of a JSONL file, the position in the others) and either the
parsed row or, for a JSONL line that is not JSON, the error.
"""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

BATCH_ROWS = 1024
"""Rows per parquet / Arrow batch: bounds memory whatever the file's size."""

TOO_DEEP = "the JSON nests too deep even to parse (past any prepare.limits.max_schema_depth)"


class InputError(ValueError):
    """The input as a whole cannot be read (missing, empty, not a known container);
    the message is one line naming the path."""


@dataclass(frozen=True)
class Row:
    number: int
    data: Any
    """The parsed row; for a line that is not JSON, its raw text (``error`` is set)."""
    error: str | None = None
    reason: str = "bad_json"
    """With ``error``: why the row is rejected (a key of the importers' ``REASONS``)."""


def _open(path: Path) -> IO[str]:
    # utf-8-sig: editors on Windows (and Excel's exports) start a UTF-8 file with a
    # byte-order mark, which json.loads refuses ("Unexpected UTF-8 BOM")
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rt", encoding="utf-8-sig", errors="replace")
    return open(path, encoding="utf-8-sig", errors="replace")


def _jsonl(path: Path) -> Iterator[Row]:
    with _open(path) as f:
        try:
            yield from _lines(f)
        except (OSError, EOFError, zlib.error) as e:  # a damaged .gz, found as it is read
            raise InputError(f"{path}: not readable: {e}") from None


def _lines(f: IO[str]) -> Iterator[Row]:
    for number, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            yield Row(number, json.loads(line))
        except json.JSONDecodeError as e:
            yield Row(number, line.rstrip("\n"), f"not JSON: {e.msg} (column {e.colno})")
        except RecursionError:  # thousands of levels: past any schema depth limit
            yield Row(number, line.rstrip("\n"), TOO_DEEP, "over_limit")


def _json(path: Path) -> Iterator[Row]:
    try:
        with _open(path) as f:
            document = json.loads(f.read())
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: not readable: {e}") from None
    except RecursionError:
        raise InputError(f"{path}: {TOO_DEEP}") from None
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # JSON Lines under a .json name (as HF datasets writes)
            yield from _jsonl(path)
            return
        raise InputError(f"{path}: not JSON: {e.msg} at line {e.lineno}") from None
    rows = document if isinstance(document, list) else [document]
    for number, row in enumerate(rows, 1):
        yield Row(number, row)


def _without_nulls(value: Any) -> Any:
    """``value`` without the dict keys whose value is None, at any depth."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _batches(batches: Iterator[pa.RecordBatch]) -> Iterator[Row]:
    # Arrow gives a column one type for all its rows: a nested column's struct type
    # holds every key of every row, so each row's tools get the other tools' schema
    # keys (and its calls the other calls' arguments) as nulls, and a tool's JSON Schema
    # reads "properties/amount: None is not of type 'object'". Arrow cannot tell an
    # absent key from a null one, so a null inside a nested value is read as absent;
    # the columns themselves keep theirs (each row has every column).
    number = 0
    for batch in batches:
        for row in batch.to_pylist():
            number += 1
            yield Row(number, {k: _without_nulls(v) for k, v in row.items()})


def _parquet(path: Path) -> Iterator[Row]:
    try:
        file = pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as e:
        raise InputError(f"{path}: not a readable parquet file: {e}") from None
    yield from _batches(file.iter_batches(batch_size=BATCH_ROWS))


def _arrow_files(directory: Path) -> list[Path]:
    state = directory / "state.json"
    if (directory / "dataset_dict.json").exists():
        splits = sorted(p.name for p in directory.iterdir() if p.is_dir())
        raise InputError(
            f"{directory}: a DatasetDict; give one split's directory ({', '.join(splits)})"
        )
    if not state.exists():
        raise InputError(
            f"{directory}: a directory, but not one datasets.save_to_disk wrote (no state.json)"
        )
    try:
        files = [directory / f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise InputError(f"{directory}/state.json: unreadable: {e}") from None
    return files


def _arrow_dir(directory: Path) -> Iterator[Row]:
    def batches() -> Iterator[pa.RecordBatch]:
        for file in _arrow_files(directory):
            with pa.memory_map(str(file)) as source:
                try:
                    reader = pa.ipc.open_stream(source)
                except pa.ArrowInvalid:
                    reader = pa.ipc.open_file(source)
                    for i in range(reader.num_record_batches):
                        yield reader.get_batch(i)
                    continue
                yield from reader

    yield from _batches(batches())


def read_rows(path: str | Path) -> Iterator[Row]:
    """Every row of ``path``, streamed where the container allows it."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if path.is_dir():
        return _arrow_dir(path)
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file")
    suffix = path.suffix.lower()
    if suffix == ".gz":  # streamed through gzip: only a JSON file says what it holds
        suffix = Path(path.stem).suffix.lower()
        if suffix not in (".json", ".jsonl", ".ndjson"):
            raise InputError(f"{path}: gzip-compressed; name it FILE.jsonl.gz or FILE.json.gz")
    if suffix == ".parquet":
        return _parquet(path)
    if suffix == ".json":
        return _json(path)
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl(path)
    with open(path, "rb") as f:
        head = f.read(4096).removeprefix(codecs.BOM_UTF8).lstrip()
    if head.startswith(b"PAR1"):
        return _parquet(path)
    if head.startswith(b"["):
        return _json(path)
    if head.startswith(b"{"):
        return _jsonl(path)
    raise InputError(f"{path}: neither JSONL, JSON, parquet nor a datasets directory")
