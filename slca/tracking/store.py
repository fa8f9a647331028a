"""Where a run is stored: the tracking URI, the SQLite store's locks and creation, the
completion markers of artifact folders, and a client whose calls a stop cannot cut."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from slca.locks import ExclusiveLock
from slca.processes import stop_signals_wait

DEFAULT_DIRECTORY = Path("mlflow")
"""Where the default SQLite store and its artifacts live (relative to the working dir)."""
COMPLETE_MARKER = ".complete"
"""The last file of every artifact folder slca uploads: a folder without it is an
upload cut short (a crash)."""
WRITER_LOCK = ".slca-writer.lock"
"""Beside ``mlflow.db``: held by the one process writing a run into the store."""
CREATE_LOCK = ".slca-create.lock"
"""Beside ``mlflow.db``: held while a process creates (and migrates) the store."""


def sqlite_uri(directory: str | os.PathLike[str] = DEFAULT_DIRECTORY) -> str:
    """``sqlite:///<absolute directory>/mlflow.db``."""
    return f"sqlite:///{(Path(directory).resolve() / 'mlflow.db').as_posix()}"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI; ``None`` for any other store."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :])


def resolve_uri(directory: str | os.PathLike[str], tracking_uri: str | None = None) -> str:
    """The store a run goes to: ``tracking_uri``, else ``MLFLOW_TRACKING_URI``, else the
    SQLite store in ``directory``."""
    return tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri(directory)


def ensure_store(tracking_uri: str) -> None:
    """Create a SQLite store's database under a lock, so two processes starting on a new
    store at once never both migrate it: constructing an ``MlflowClient`` creates and
    migrates the database, so every client slca makes on a store it may be the first to
    open comes after this."""
    db = sqlite_path(tracking_uri)
    if db is None:
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    with ExclusiveLock(db.parent / CREATE_LOCK, what=f"MLflow store {db}", wait=600):
        MlflowClient(tracking_uri=tracking_uri).search_experiments(max_results=1)


def completed_dirs(client: MlflowClient, run_id: str, root: str) -> list[str]:
    """The artifact folders directly under ``root`` of a run that hold the completion
    marker, in the store's order."""
    done = []
    for entry in client.list_artifacts(run_id, root):
        if not entry.is_dir:
            continue
        names = {os.path.basename(f.path) for f in client.list_artifacts(run_id, entry.path)}
        if COMPLETE_MARKER in names:
            done.append(entry.path)
    return done


def upload_complete(client: MlflowClient, run_id: str, source: Path, artifact_path: str) -> None:
    """Upload a directory's contents (or one file) to ``artifact_path``, then the
    completion marker."""
    if source.is_dir():
        client.log_artifacts(run_id, str(source), artifact_path)
    else:
        client.log_artifact(run_id, str(source), artifact_path)
    with tempfile.TemporaryDirectory() as tmp:
        marker = Path(tmp) / COMPLETE_MARKER
        marker.write_text(f"{int(time.time())}\n")
        client.log_artifact(run_id, str(marker), artifact_path)


def delete_partial(artifact_root: str, artifact_path: str) -> None:
    """Delete what a cut-short upload left at ``artifact_path`` (files, MLflow's
    ``.artifact.uploading.*`` temporaries) where the artifact store can delete (the
    local one can), so the folder will hold the new upload only."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    repository = get_artifact_repository(artifact_root)
    try:
        if repository.list_artifacts(artifact_path):
            repository.delete_artifacts(artifact_path)
    except (NotImplementedError, MlflowException):
        pass  # a store that cannot delete: the new files overwrite the old ones


def log_text(client: MlflowClient, run_id: str, text: str, artifact_file: str) -> None:
    """``text`` as the artifact file ``artifact_file`` of a run."""
    directory, name = os.path.split(artifact_file)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(text, encoding="utf-8")
        client.log_artifact(run_id, str(path), directory or None)


class WholeCalls:
    """An ``MlflowClient`` whose every call runs whole: a stop signal arriving meanwhile
    is handled when the call returns (:func:`slca.processes.stop_signals_wait`), so no
    store read is cut off holding SQLite's lock against the run's own ending."""

    def __init__(self, client: MlflowClient):
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def whole(*args: Any, **kwargs: Any) -> Any:
            with stop_signals_wait():
                return attribute(*args, **kwargs)

        return whole
