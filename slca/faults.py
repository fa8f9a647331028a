"""Faults of the machine, not of the code, in one line that names the place.

A full disk reaches the user as ``SafetensorError: … No space left on device`` or as
torch's ``[enforce fail at inline_container.cc:672] unexpected pos …``; a damaged MLflow
store as a 94-line SQLAlchemy traceback. :func:`naming_the_place` turns those into a
:class:`FaultError` that says what happened, to which path, which setting chose it, and
what to do; anything else passes through unchanged.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_FULL = (
    "no space left on device",
    "unexpected pos",  # torch's zip writer when a write comes up short
    "database or disk is full",
    "disk quota exceeded",
)
_READ_ONLY = ("read-only file system", "permission denied")
_MALFORMED = ("database disk image is malformed", "file is not a database")
_LOCKED = ("database is locked",)


class FaultError(RuntimeError):
    """A machine fault under a configured path, described in one line."""


class CheckpointError(FaultError):
    """No checkpoint of a directory can be resumed from (each failed verification)."""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def fault_reason(exc: BaseException, setting: str) -> str | None:
    """What the fault behind ``exc`` (or any exception it was raised from) is, and what
    to do about it; None when it is not one of these."""
    for link in _chain(exc):
        code = getattr(link, "errno", None)
        text = str(link).lower()
        if code in (errno.ENOSPC, errno.EDQUOT) or any(s in text for s in _FULL):
            return (
                f"the disk is full; free space or point {setting} elsewhere, then run "
                "again (--resume continues a training run from its last checkpoint)"
            )
        if code in (errno.EROFS, errno.EACCES, errno.EPERM) or any(s in text for s in _READ_ONLY):
            return f"not writable (read-only or no permission); point {setting} elsewhere"
        if any(s in text for s in _MALFORMED):
            return (
                "the MLflow store is damaged (not a valid SQLite database); move it away "
                f"to start a new one, or restore it from a copy ({setting})"
            )
        if any(s in text for s in _LOCKED):
            return (
                "the MLflow store is locked by another process (MLflow waits out "
                "SQLite's busy_timeout, 20 s, then gives up); stop the other writer, or "
                f"use another store ({setting})"
            )
    return None


@contextmanager
def naming_the_place(path: str | Path, setting: str) -> Iterator[None]:
    """Re-raise a machine fault met under ``path`` as a one-line :class:`FaultError`
    (the original is its ``__cause__``, for ``--debug``)."""
    try:
        yield
    except FaultError:
        raise
    except Exception as exc:
        reason = fault_reason(exc, setting)
        if reason is None:
            raise
        raise FaultError(f"{setting} {Path(path)}: {reason}") from exc
