"""Parquet storage of task records, written atomically.

Layout of a dataset directory (``data/tasks`` by default)::

    train.parquet val.parquet test.parquet eval.parquet   one file per split
    manifest.json                                         counts, hashes, rejects
    rejects.jsonl                                         quarantined records (may be empty)

Scalar fields are columns; nested fields (messages, tools, gold, facts, world) are
canonical JSON text, so the files are readable by any parquet reader and hash stably.
The whole directory is built next to its destination and renamed into place, so a
reader sees the old dataset or the new one, never a mix or a half-written file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from slca.config import describe
from slca.data.record import SPLITS, TaskRecord
from slca.jsonutil import canonical_json

JSON_COLUMNS = ("messages", "tools", "gold", "facts", "world")
SCALAR_COLUMNS = ("id", "source", "domain", "split", "eval_only")
COLUMNS = SCALAR_COLUMNS + JSON_COLUMNS
OPTIONAL_COLUMNS = ("answer",)
"""Columns added after the first datasets were written: read as null when absent."""

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("source", pa.string()),
        ("domain", pa.string()),
        ("split", pa.string()),
        ("eval_only", pa.bool_()),
    ]
    + [(c, pa.string()) for c in JSON_COLUMNS]
    + [("answer", pa.string())]
)


def record_to_row(r: TaskRecord) -> dict[str, Any]:
    d = r.model_dump(mode="json")
    # fields added later are left out at their defaults, so records that do not use
    # them store (and hash) exactly as before they existed
    d["gold"] = [
        [
            {k: v for k, v in c.items() if v is not None and (k, v) != ("arguments_known", True)}
            for c in s
        ]
        for s in d["gold"]
    ]
    d["messages"] = [{k: v for k, v in m.items() if v is not None} for m in d["messages"]]
    row = {c: d[c] for c in SCALAR_COLUMNS}
    for c in JSON_COLUMNS:
        row[c] = None if d[c] is None else canonical_json(d[c])
    row["answer"] = d["answer"]
    return row


def row_to_data(row: dict[str, Any]) -> dict[str, Any]:
    """A stored row back to plain record data (JSON columns parsed)."""
    out = {c: row[c] for c in SCALAR_COLUMNS}
    for c in JSON_COLUMNS:
        v = row.get(c)
        out[c] = None if v is None else json.loads(v)
    out["answer"] = row.get("answer")
    return out


def records_table(records: Iterable[TaskRecord]) -> pa.Table:
    rows = [record_to_row(r) for r in records]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def content_hash(records: Iterable[TaskRecord]) -> str:
    """sha256 over the records' canonical JSON lines: independent of the parquet encoder."""
    h = hashlib.sha256()
    for r in records:
        row = record_to_row(r)
        if row["answer"] is None:
            del row["answer"]
        h.update(canonical_json(row).encode())
        h.update(b"\n")
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_parquet(table: pa.Table, path: Path) -> None:
    # No statistics of JSON text; a fixed writer setup keeps bytes stable across runs.
    pq.write_table(
        table,
        path,
        compression="zstd",
        write_statistics=["id", "split"],
        use_dictionary=["source", "domain", "split"],
    )


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as e:
        raise ValueError(f"{path}: not a readable parquet file: {e}") from None
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}")
    return table.to_pylist()


def read_records(path: str | Path) -> list[TaskRecord]:
    """Read and re-validate every record; errors name the file, row/id and field."""
    out = []
    for i, row in enumerate(read_rows(path)):
        try:
            out.append(TaskRecord.model_validate(row_to_data(row)))
        except ValidationError as e:  # one line, each error naming its field
            raise ValueError(f"{path}: row {i} (id={row.get('id')!r}): {describe(e)}") from None
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: row {i} (id={row.get('id')!r}): {e}") from None
    return out


def read_dataset(directory: str | Path, splits: Iterable[str] = SPLITS) -> list[TaskRecord]:
    directory = Path(directory)
    out: list[TaskRecord] = []
    for s in splits:
        p = directory / f"{s}.parquet"
        if p.exists():
            out.extend(read_records(p))
    return out


def build_train_set(records: Iterable[TaskRecord]) -> list[TaskRecord]:
    """The records a trainer may see: refuses eval-only or non-train records outright."""
    records = list(records)
    bad = [r.id for r in records if r.eval_only or r.split != "train"]
    if bad:
        raise ValueError(
            f"refusing to train on {len(bad)} eval-only or non-train records, e.g. {bad[:5]}"
        )
    return records


def load_train_set(directory: str | Path) -> list[TaskRecord]:
    return build_train_set(read_dataset(directory, ["train"]))


@contextmanager
def atomic_dir(dest: str | Path) -> Iterator[Path]:
    """Yield a fresh sibling temp directory; on success it replaces ``dest`` by rename.

    On any exception the temp directory is removed and ``dest`` is left as it was.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the dataset is not
    try:
        yield tmp
        for f in tmp.iterdir():
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        old = None
        if dest.exists():
            old = dest.parent / f".{dest.name}.old-{os.getpid()}"
            os.replace(dest, old)
        os.replace(tmp, dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
