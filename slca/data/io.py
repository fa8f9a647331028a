"""Parquet storage of task records, written atomically.

Layout of a dataset directory (``data/tasks`` by default)::

    train.parquet val.parquet test.parquet eval.parquet   one file per split
    manifest.json                                         counts, hashes, rejects
    rejects.jsonl                                         quarantined records (may be empty)

Scalar fields are columns; nested fields (messages, tools, gold, facts, world) are
canonical JSON text, so the files are readable by any parquet reader and hash stably.
The whole directory is built next to its destination and renamed into place, so a
reader sees the old dataset or the new one, never a mix or a half-written file.

Every reader holds the rows to the size limits the manifest records (``prepare.limits``,
:mod:`slca.data.limits`; a row too deep even to parse is one line, never a
RecursionError), and training reads a split through :func:`verified_split`, which
refuses a file whose content is not the one the manifest records.
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
from slca.config.data import DataLimits
from slca.data import limits as _limits
from slca.data.record import SPLITS, TaskRecord
from slca.jsonutil import canonical_json

MANIFEST = "manifest.json"
"""What ``prepare`` writes beside the split files: counts, per-split hashes, limits."""

REVALIDATE = "`slca data` (or `dvc repro validate`)"
"""The command that rebuilds a dataset directory from its sources and validates it."""

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


def row_to_data(row: dict[str, Any], limits: DataLimits | None = None) -> dict[str, Any]:
    """A stored row back to plain record data (JSON columns parsed). A column nested
    too deep for the parser is a ValueError ``column: reason`` (``limits`` names the
    schema depth setting), never a RecursionError."""
    out = {c: row[c] for c in SCALAR_COLUMNS}
    for c in JSON_COLUMNS:
        v = row.get(c)
        try:
            out[c] = None if v is None else json.loads(v)
        except RecursionError:  # the parser recursed past Python's stack: say why, in one line
            reason = _limits.too_deep_to_parse(c, limits or DataLimits())
            raise ValueError(f"{c}: {reason}") from None
    out["answer"] = row.get("answer")
    return out


def row_bytes(row: dict[str, Any]) -> int:
    """A stored row's size: UTF-8 bytes of its JSON columns and answer."""
    return sum(
        _limits.utf8_size(v) for c in (*JSON_COLUMNS, "answer") if isinstance(v := row.get(c), str)
    )


def row_problem(
    row: dict[str, Any], limits: DataLimits, seen: dict[str, Any] | None = None
) -> tuple[tuple[str, str] | None, dict[str, Any] | None]:
    """A stored row against the size ``limits``: (the first problem, or None; the row's
    parsed data, or None when it could not be parsed). The tools come first (the more
    specific reason: a 5 MB description is also a task over 1 MB), then the task's
    size; ``seen`` remembers each distinct tools text's verdict (rows of one source
    share tool lists)."""
    try:
        data = row_to_data(row, limits)
    except ValueError as e:
        field, _, reason = str(e).partition(": ")
        return (field, reason), None
    text = row.get("tools")
    if seen is not None and text in seen:
        problem = seen[text]
    else:
        problem = _limits.tool_problems(data["tools"], limits)
        if seen is not None:
            seen[text] = problem
    return problem or _limits.task_size_problem(row_bytes(row), limits), data


def check_rows(path: str | Path, rows: Iterable[dict[str, Any]], limits: DataLimits) -> None:
    """Refuse the stored ``rows`` of ``path`` when one is over the size ``limits``: one
    line naming the file, the first such row's id, its field and the reason, and how
    many other rows are over."""
    first, others, seen = None, 0, {}
    for i, row in enumerate(rows):
        problem, _ = row_problem(row, limits, seen)
        if problem is None:
            continue
        if first is None:
            first = f"{path}: row {i} (id={row.get('id')!r}): {problem[0]}: {problem[1]}"
        else:
            others += 1
    if first is not None:
        raise ValueError(first + (f" (and {others} more rows over the limits)" if others else ""))


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


def read_rows(path: str | Path, content: bytes | None = None) -> list[dict[str, Any]]:
    """The rows of a split file (``content``: its bytes, when the caller read them)."""
    path = Path(path)
    try:
        table = pq.read_table(path if content is None else pa.BufferReader(content))
    except (OSError, pa.ArrowInvalid) as e:
        raise ValueError(f"{path}: not a readable parquet file: {e}") from None
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}")
    return table.to_pylist()


def read_records(
    path: str | Path, limits: DataLimits | None = None, content: bytes | None = None
) -> list[TaskRecord]:
    """Read and re-validate every record; errors name the file, row/id and field.

    Rows are held to ``limits`` (default: those of the manifest beside the file,
    :func:`dataset_limits`) before they are validated. ``content``: the file's bytes,
    when the caller read them.
    """
    path = Path(path)
    limits = limits or dataset_limits(path.parent)
    seen: dict[str, Any] = {}
    out = []
    for i, row in enumerate(read_rows(path, content)):
        where = f"{path}: row {i} (id={row.get('id')!r})"
        problem, data = row_problem(row, limits, seen)
        if problem is not None:
            raise ValueError(f"{where}: {problem[0]}: {problem[1]}")
        try:
            out.append(TaskRecord.model_validate(data))
        except ValidationError as e:  # one line, each error naming its field
            raise ValueError(f"{where}: {describe(e)}") from None
        except (ValueError, TypeError) as e:
            raise ValueError(f"{where}: {e}") from None
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
    """The train split as a trainer may see it: the content the manifest records
    (:func:`verified_split`), of train records only (:func:`build_train_set`)."""
    return build_train_set(verified_split(directory, "train")[0])


def read_manifest(directory: str | Path) -> dict[str, Any] | None:
    """The manifest of a dataset directory; None when it has none."""
    path = Path(directory) / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable: {e}") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: not a JSON object")
    return manifest


def dataset_limits(directory: str | Path) -> DataLimits:
    """The size limits the data of ``directory`` was prepared under: its manifest's
    ``limits`` (recorded when ``prepare.limits`` is not the defaults), else the defaults."""
    manifest = read_manifest(directory) or {}
    try:
        return DataLimits.model_validate(manifest.get("limits") or {})
    except ValidationError as e:
        raise ValueError(f"{Path(directory) / MANIFEST}: limits: {describe(e)}") from None


class DataDrift(ValueError):
    """A split file's content is not what its dataset's manifest records."""


def verified_split(directory: str | Path, split: str) -> tuple[list[TaskRecord], str]:
    """The records of one split file and their :func:`content_hash`: what a run reads
    and records. With a manifest in ``directory`` (prepare's), the content must be the
    one it records for the split, else :class:`DataDrift` names the file and the
    command that rebuilds and re-validates it: the file changed after prepare wrote it,
    so validation never saw it.

    The file is read once: its bytes are hashed and parsed. When they are the bytes
    prepare wrote (the manifest's ``files``), the content hash is the manifest's
    (prepare wrote them from those records); otherwise it is computed from the rows
    read. A directory without a manifest is not prepared data and makes no claim to
    check: it is read as it is (tests, hand-made sets), its hash computed.
    """
    directory = Path(directory)
    path = directory / f"{split}.parquet"
    content = path.read_bytes() if path.exists() else None
    records = [] if content is None else read_records(path, content=content)
    manifest = read_manifest(directory)
    if manifest is None:
        return records, content_hash(records)
    recorded = (manifest.get("content_sha256") or {}).get(split)
    wrote = (manifest.get("files") or {}).get(path.name)
    if content is not None and wrote == hashlib.sha256(content).hexdigest() and recorded:
        return records, recorded
    digest = content_hash(records)
    if content is None and recorded is None:  # a split the manifest knows nothing of
        return records, digest
    if recorded != digest:
        found = f"content sha256 {digest[:12]}…" if content is not None else "missing"
        said = f"{recorded[:12]}…" if isinstance(recorded, str) else "no hash for it"
        raise DataDrift(
            f"{path}: {found}, but {directory / MANIFEST} records {said}: the split "
            f"changed after prepare wrote it; rebuild and re-validate the data with "
            f"{REVALIDATE}"
        )
    return records, digest


class OutputConflict(ValueError):
    """An output directory holds what this step did not write; nothing was replaced. A
    ``ValueError``, so the command lines report it in one line."""


def check_replaceable(dest: str | Path, owns: Iterable[str], inputs: Iterable[Path] = ()) -> None:
    """Refuse, before any work, a ``dest`` that :func:`atomic_dir` would replace but whose
    content this step did not write: a file, a directory holding entries not named in
    ``owns`` (an earlier output of the same step is replaced), the working directory or
    one above it, or a directory holding one of the step's ``inputs``."""
    dest = Path(dest).resolve()
    here = Path.cwd().resolve()
    if dest == here or dest in here.parents:
        raise OutputConflict(f"{dest}: the working directory or one above it; name a new one")
    for source in inputs:
        source = Path(source).resolve()
        if source == dest or dest in source.parents:
            raise OutputConflict(f"{dest}: holds the input {source}; name another directory")
    if not dest.exists():
        return
    if not dest.is_dir():
        raise OutputConflict(f"{dest}: a file, not a directory; name another directory")
    owned = set(owns)
    foreign = sorted(p.name for p in dest.iterdir() if p.name not in owned)
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise OutputConflict(
            f"{dest}: holds {', '.join(foreign[:3])}{more}, which this step does not write "
            "and would delete; name a new or empty directory"
        )


@contextmanager
def atomic_dir(dest: str | Path) -> Iterator[Path]:
    """Yield a fresh sibling temp directory; on success it replaces ``dest`` by rename.

    On any exception the temp directory is removed and ``dest`` is left as it was. A
    ``dest`` that is a file is refused before anything is written: it is never a
    directory output of an earlier run. A directory is replaced whole; a step whose
    destination a user names checks it first (:func:`check_replaceable`).
    """
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise OutputConflict(f"{dest}: a file, not a directory; name another directory")
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
