"""One writer per directory and store: exclusive, non-blocking file locks that name
their holder.

An :class:`ExclusiveLock` is a ``filelock`` lock (``flock`` on Linux: the kernel drops
it when the holder dies, kill -9 included, so a crash never leaves a stale lock) plus
an owner file beside it with the holder's PID, host, start time and command line, so a
second writer is refused at once with a message that says who holds it. The owner file
is information only; the lock is the truth.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from types import TracebackType

from filelock import FileLock, Timeout

from slca.atomic import atomic_write_text


class LockHeld(ValueError):
    """Another process holds the lock; the message names it (PID, host, since when).
    A ``ValueError``, so the command lines report it in one line."""


def _owner_path(lock_path: Path) -> Path:
    return lock_path.with_name(lock_path.name + ".owner")


def holder(lock_path: str | os.PathLike[str]) -> dict | None:
    """What the owner file says about the lock's last holder (None when unreadable)."""
    try:
        return json.loads(_owner_path(Path(lock_path)).read_text())
    except (OSError, ValueError):
        return None


class ExclusiveLock:
    """``with ExclusiveLock(path, what="checkpoint directory x"):`` — held for the block;
    :class:`LockHeld` at once when another process holds it. ``wait`` seconds > 0 waits
    that long instead (for short critical sections, e.g. creating a store)."""

    def __init__(self, path: str | os.PathLike[str], *, what: str, wait: float = 0.0) -> None:
        self.path = Path(path)
        self.what = what
        self.wait = wait
        self._lock: FileLock | None = None

    def acquire(self) -> ExclusiveLock:
        if self._lock is not None:  # already ours
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.path), timeout=self.wait, thread_local=False)
        try:
            lock.acquire()
        except Timeout:
            raise LockHeld(self._held_message()) from None
        self._lock = lock
        owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join(sys.argv)[:500],
        }
        atomic_write_text(_owner_path(self.path), json.dumps(owner) + "\n")
        return self

    def _held_message(self) -> str:
        found = holder(self.path)
        if found is None:
            who = "another process"
        else:
            who = f"PID {found.get('pid')} on {found.get('host')} since {found.get('since')}"
        return f"{self.what} is in use by {who} ({self.path}); one writer at a time"

    def release(self) -> None:
        if self._lock is not None:
            _owner_path(self.path).unlink(missing_ok=True)
            self._lock.release()
            self._lock = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def __enter__(self) -> ExclusiveLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
