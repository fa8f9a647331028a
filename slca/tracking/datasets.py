"""The task data a run used, as MLflow dataset inputs: one per split file, named after
the data directory and the split, with the manifest's content hash as its digest, the
file's path as its source and ``training``/``validation``/``test`` as its context, so the
MLflow UI's Dataset column says which data a run trained or was evaluated on."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mlflow.entities import DatasetInput, InputTag

CONTEXTS = {"train": "training", "val": "validation", "test": "test", "eval": "test"}
"""A split's MLflow dataset context (``mlflow.data.context``): what the run did with it."""
CONTEXT_TAG = "mlflow.data.context"
"""The input tag MLflow's UI reads the context from."""
HASH_TAG = "slca.content_sha256"
"""The input tag holding the whole content hash (the digest is its first
:data:`DIGEST_LENGTH` characters)."""
DIGEST_LENGTH = 36
"""MLflow's longest dataset digest (``MAX_DATASET_DIGEST_SIZE``): a server refuses a
longer one, so a 64-character sha256 is cut to its first 36."""
INDEX_COLUMNS = ("id", "source", "domain", "split", "eval_only")
"""The columns of a split read for the dataset's schema and row count: the scalar ones
(inferring a schema for the nested conversation and tool columns costs seconds)."""


@dataclass(frozen=True)
class SplitInput:
    """One split file a run read."""

    path: Path
    """The split's parquet file."""
    content_hash: str
    """The content hash the run identity records (the manifest's, for prepared data)."""
    context: str
    """``training``, ``validation`` or ``test``."""

    @property
    def name(self) -> str:
        """``<data directory>/<split>``, e.g. ``tasks/train``."""
        return f"{self.path.parent.name}/{self.path.stem}"

    @property
    def digest(self) -> str:
        return self.content_hash[:DIGEST_LENGTH]


def split_input(
    directory: str | os.PathLike[str],
    split: str,
    content_hash: str | None = None,
    context: str | None = None,
) -> SplitInput:
    """The input of ``directory/<split>.parquet``: ``content_hash`` as given (what the run
    read and checked), else the manifest's for the split, else the file's sha256;
    ``context`` as given, else the split's (:data:`CONTEXTS`)."""
    path = Path(directory).resolve() / f"{split}.parquet"
    if content_hash is None:
        content_hash = manifest_hash(directory, split) or file_hash(path)
    return SplitInput(path, content_hash, context or CONTEXTS.get(split, "test"))


def manifest_hash(directory: str | os.PathLike[str], split: str) -> str | None:
    """The content hash ``directory``'s manifest records for ``split``; None without one."""
    manifest = Path(directory) / "manifest.json"
    if not manifest.exists():
        return None
    try:
        return (json.loads(manifest.read_text()).get("content_sha256") or {}).get(split)
    except (OSError, ValueError, AttributeError):
        return None


def file_hash(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"


def dataset_inputs(inputs: Iterable[SplitInput]) -> list[DatasetInput]:
    """MLflow dataset inputs of the splits: a pandas dataset of each file's index columns
    (schema and row count; a missing file: none), source the file's path."""
    import pandas as pd
    from mlflow.data.dataset_source_registry import get_dataset_source_from_json
    from mlflow.data.pandas_dataset import from_pandas

    out, seen = [], set()
    for item in inputs:
        if (item.name, item.digest, item.context) in seen:
            continue
        seen.add((item.name, item.digest, item.context))
        if item.path.exists():
            frame = pd.read_parquet(item.path, columns=list(INDEX_COLUMNS))
        else:
            frame = pd.DataFrame(columns=list(INDEX_COLUMNS))
        source = get_dataset_source_from_json(json.dumps({"uri": str(item.path)}), "local")
        with warnings.catch_warnings():  # MLflow's note that a source it was given is local
            warnings.simplefilter("ignore")
            dataset = from_pandas(frame, source=source, name=item.name, digest=item.digest)
        tags = [InputTag(CONTEXT_TAG, item.context), InputTag(HASH_TAG, item.content_hash)]
        out.append(DatasetInput(dataset._to_mlflow_entity(), tags))
    return out


def read_inputs(run_inputs: object) -> list[dict[str, str]]:
    """A run's dataset inputs (``run.inputs``) as ``{name, digest, source, context,
    content_sha256}`` dicts, for tests and the command line."""
    found = []
    for entry in getattr(run_inputs, "dataset_inputs", None) or []:
        tags = {t.key: t.value for t in entry.tags}
        found.append(
            {
                "name": entry.dataset.name,
                "digest": entry.dataset.digest,
                "source": json.loads(entry.dataset.source).get("uri", entry.dataset.source),
                "context": tags.get(CONTEXT_TAG, ""),
                "content_sha256": tags.get(HASH_TAG, ""),
            }
        )
    return found


def inputs_of(hashes: Mapping[str, str], directory: str | os.PathLike[str]) -> list[SplitInput]:
    """``{split: content hash}`` (what a run read) as inputs of ``directory``'s files."""
    return [split_input(directory, split, digest) for split, digest in hashes.items()]
