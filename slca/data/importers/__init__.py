"""Users' tool-calling data, in the formats people have, as task records.

One module per format, each with ``NAME``, ``sniff(row) -> bool`` (does a row look like
this format) and ``conversation(row) -> Conversation`` (raises
:class:`~slca.data.importers.conversation.RowReject`); :data:`FORMATS` is the registry
and the only dispatch path. ``auto`` picks the format most of the first rows match.

Every input row ends up imported (one task per answered user turn) or rejected with
its reason: ``imported + rejected == rows``, always. :func:`import_path` gives the
records to ``prepare``; :func:`import_to_dir` is ``slca data import``: it streams the
tasks into ``tasks.parquet`` beside ``report.json`` and ``rejects.jsonl``.
"""

from __future__ import annotations

import collections
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow.parquet as pq

from slca.config.data import DataLimits, check_import_name, import_name
from slca.data import io
from slca.data.importers import openai, sharegpt, toucan, verl, xlam
from slca.data.importers.conversation import REASONS, RowReject, conversation_tasks
from slca.data.importers.rows import InputError, Row, read_rows
from slca.data.record import EVAL_SPLIT, TaskRecord

FORMATS: dict[str, ModuleType] = {m.NAME: m for m in (verl, toucan, xlam, sharegpt, openai)}
"""Format name -> module; the order is the order ``auto`` tries them in (most specific
first: a verl row also has the keys of a plain message list)."""

SNIFF_ROWS = 50
"""Rows ``auto`` looks at."""

__all__ = ["FORMATS", "REASONS", "ImportResult", "InputError", "import_path", "import_to_dir"]


def detect(rows: list[Row], path: Path) -> str:
    """The format most of ``rows`` match; an :class:`InputError` naming ``path`` when
    none matches any."""
    votes = collections.Counter(
        name
        for row in rows
        if row.error is None
        for name, m in FORMATS.items()
        if m.sniff(row.data)
    )
    if not votes:
        if all(row.error is not None for row in rows):
            first = rows[0]
            raise InputError(
                f"{path}: not JSON Lines: none of its first {len(rows)} lines is a JSON row "
                f"(line {first.number}: {first.error}); slca reads JSONL, JSON, parquet "
                "or a datasets directory"
            )
        if not any(isinstance(r.data, dict) for r in rows):
            raise InputError(f"{path}: its first rows are JSON but not objects (one per row)")
        keys = sorted({k for r in rows if isinstance(r.data, dict) for k in r.data})[:12]
        raise InputError(
            f"{path}: in none of the known formats ({', '.join(FORMATS)}); "
            f"the first rows' keys: {keys}"
        )
    best = max(votes.values())
    return next(name for name in FORMATS if votes[name] == best)


@dataclass
class ImportResult:
    """Counts of one import (``report.json``) as it goes."""

    path: str
    format: str
    source: str
    rows: int = 0
    imported: int = 0
    rejected: int = 0
    tasks: int = 0
    no_call_tasks: int = 0
    context_tasks: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def report(self) -> dict[str, Any]:
        out = dict(vars(self))
        out["rejected_by_reason"] = dict(sorted(self.rejected_by_reason.items()))
        out["seconds"] = round(self.seconds, 2)
        return out

    def top_reasons(self, n: int | None = 3) -> str:
        """``reason (count)``, most frequent first: the first ``n`` (all when None),
        and how many more there are past them."""
        ranked = sorted(self.rejected_by_reason.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ranked if n is None else ranked[:n]
        line = ", ".join(f"{reason} ({count})" for reason, count in shown)
        return line + (f", …, {len(ranked) - len(shown)} more" if len(ranked) > len(shown) else "")

    def summary(self) -> str:
        """The line ``slca data import`` prints: the counts and every reject reason."""
        line = (
            f"{self.path}: {self.format}: {_count(self.rows, 'row')}, {self.imported} imported "
            f"({_count(self.tasks, 'task')}), {self.rejected} rejected"
        )
        return line + (f": {self.top_reasons(None)}" if self.rejected else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))


def _rows(path: Path, fmt: str) -> tuple[str, Iterator[Row]]:
    if fmt != "auto" and fmt not in FORMATS:
        raise InputError(f"{path}: unknown format {fmt!r}; known: auto, {', '.join(FORMATS)}")
    rows = read_rows(path)
    head = list(itertools.islice(rows, SNIFF_ROWS))
    if not head:
        raise InputError(f"{path}: holds no row")
    if fmt == "auto":
        fmt = detect(head, path)
    return fmt, itertools.chain(head, rows)


def iter_import(
    path: str | Path,
    fmt: str,
    source: str,
    split: str = "train",
    limits: DataLimits | None = None,
) -> tuple[ImportResult, Iterator[tuple[Row, list[TaskRecord] | RowReject]]]:
    """The import's running counts, and each row with its tasks or why it was rejected
    (a task over the size ``limits``, default the defaults: ``over_limit``).

    The counts are complete once the iterator is exhausted. Raises :class:`InputError`
    at once for an input that cannot be read at all (missing, empty, no known format).
    """
    path = Path(path)
    fmt, rows = _rows(path, fmt)
    module = FORMATS[fmt]
    result = ImportResult(str(path), fmt, source)

    def results() -> Iterator[tuple[Row, list[TaskRecord] | RowReject]]:
        start = time.perf_counter()
        reasons = result.rejected_by_reason
        for row in rows:
            result.rows += 1
            try:
                if row.error is not None:
                    raise RowReject(row.reason, "<row>", row.error)
                if not isinstance(row.data, dict):
                    raise RowReject("unknown_format", "<row>", "a row is not an object")
                conv = module.conversation(row.data)
                tasks = conversation_tasks(conv, source, str(row.number), limits)
            except RowReject as reject:
                result.rejected += 1
                reasons[reject.reason] = reasons.get(reject.reason, 0) + 1
                yield row, reject
                continue
            if split == EVAL_SPLIT:
                tasks = [
                    t.model_copy(update={"split": EVAL_SPLIT, "eval_only": True}) for t in tasks
                ]
            result.imported += 1
            result.tasks += len(tasks)
            result.no_call_tasks += sum(not t.gold for t in tasks)
            result.context_tasks += sum(
                any(m.role != "system" for m in t.messages[:-1]) for t in tasks
            )
            yield row, tasks
        result.seconds = time.perf_counter() - start

    return result, results()


def reject_line(row: Row, reject: RowReject) -> dict[str, Any]:
    """One line of ``rejects.jsonl``: the row number, the reason and the original record."""
    return {
        "row": row.number,
        "reason": reject.reason,
        "field": reject.field,
        "message": reject.message,
        "record": _json_safe(row.data),
    }


def import_path(
    path: str | Path,
    fmt: str,
    source: str,
    split: str = "train",
    limits: DataLimits | None = None,
) -> tuple[list[TaskRecord], list[dict[str, Any]], ImportResult]:
    """All tasks of one file in memory, the reject lines and the counts (``prepare``)."""
    result, items = iter_import(path, fmt, source, split, limits)
    records: list[TaskRecord] = []
    rejects: list[dict[str, Any]] = []
    for row, outcome in items:
        if isinstance(outcome, RowReject):
            rejects.append(reject_line(row, outcome))
        else:
            records.extend(outcome)
    return records, rejects, result


IMPORT_FILES = ("tasks.parquet", "report.json", "rejects.jsonl")
"""What :func:`import_to_dir` writes: an ``out_dir`` holding anything else is refused."""


def import_to_dir(
    path: str | Path,
    fmt: str,
    out_dir: str | Path,
    source: str | None = None,
    split: str = "train",
    limits: DataLimits | None = None,
) -> ImportResult:
    """``slca data import``: ``out_dir/tasks.parquet``, ``report.json`` and
    ``rejects.jsonl``, streamed (a batch of tasks in memory at a time) and put in place
    together (the directory is written beside its destination, then renamed)."""
    path = Path(path)
    source = check_import_name(source) if source else import_name(str(path))
    io.check_replaceable(out_dir, IMPORT_FILES, inputs=[path])
    result, items = iter_import(path, fmt, source, split, limits)
    with io.atomic_dir(out_dir) as tmp:
        writer = pq.ParquetWriter(tmp / "tasks.parquet", io.SCHEMA, compression="zstd")
        batch: list[TaskRecord] = []
        with writer, open(tmp / "rejects.jsonl", "w", encoding="utf-8") as rejects:
            for row, outcome in items:
                if isinstance(outcome, RowReject):
                    rejects.write(json.dumps(reject_line(row, outcome), ensure_ascii=False) + "\n")
                    continue
                batch.extend(outcome)
                if len(batch) >= 1024:
                    writer.write_table(io.records_table(batch))
                    batch = []
            if batch or result.tasks == 0:
                writer.write_table(io.records_table(batch))
        (tmp / "report.json").write_text(json.dumps(result.report(), indent=2) + "\n")
    return result
