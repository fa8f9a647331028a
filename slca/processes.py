"""Servers die with their owner: child processes that never outlive the process that
started them, kill -9 included.

Two pieces, both plain standard library:

- :func:`die_with_parent`: a ``preexec_fn`` asking the kernel to send the child
  SIGTERM when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``); for a child that
  has no children of its own (Prefect's ephemeral uvicorn server).
- :func:`supervise` (``python -m slca.processes --parent PID -- command …``): a small
  supervisor for a server that starts workers of its own (``mlflow ui``; ``slca ui``'s
  Prefect server, ``slca_pipeline.server``, alike). It runs the command in its own
  process group and stops the whole group, workers included, when it is told to
  (SIGTERM, SIGINT, SIGHUP) or when its parent dies: the parent-death signal, and,
  where the kernel has none, by watching the parent's PID.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

PR_SET_PDEATHSIG = 1
GRACE_S = 10.0
"""How long a stopped group has to exit after SIGTERM before it is killed."""


def end_like_ctrl_c() -> None:
    """SIGTERM ends this process as Ctrl-C does, whichever entry point started it
    (``slca``, ``python -m slca.…``, a DVC stage, a Prefect worker's cancellation):
    ``KeyboardInterrupt`` in the main thread, so context managers and ``finally`` blocks
    run: the MLflow run ends KILLED, locks and their owner files are released, and the
    last complete checkpoint stays the one a resume takes. A second SIGTERM while that
    cleanup runs is ignored rather than cutting it short (SIGKILL still ends it)."""

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():  # where Python allows it
        signal.signal(signal.SIGTERM, interrupt)


def _set_parent_death_signal(signum: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``signum`` when the
    process that started it dies (kill -9 included), and exits at once if that process
    died before the child could ask."""
    parent = os.getpid()

    def preexec() -> None:
        _set_parent_death_signal(signum)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def supervised(command: Sequence[str]) -> list[str]:
    """``command`` run under :func:`supervise` on behalf of this process."""
    return [sys.executable, "-m", "slca.processes", "--parent", str(os.getpid()), "--", *command]


def supervise(parent: int, command: Sequence[str], poll_s: float = 0.2) -> int:
    """Run ``command`` in this process's group until it exits, a stop signal arrives,
    or ``parent`` dies; then stop the group. Returns the command's exit status."""
    _set_parent_death_signal(signal.SIGTERM)
    with contextlib.suppress(OSError):  # already a group leader under start_new_session
        os.setpgid(0, 0)
    stop = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda s, _f: stop.append(s))
    if os.getppid() != parent:
        return 1
    child = subprocess.Popen(list(command))
    while child.poll() is None and not stop and os.getppid() == parent:
        time.sleep(poll_s)
    if child.poll() is None:
        _stop_group(child)
    return child.returncode if child.returncode is not None else 1


def _stop_group(child: subprocess.Popen) -> None:
    group = os.getpgid(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group signal reaches us too
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        child.poll()
        if child.returncode is not None and not _others_in_group(group):
            return
        time.sleep(0.1)
    for pid in _others_in_group(group):  # stragglers
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    child.wait()


def _others_in_group(group: int) -> list[int]:
    """Live processes of process group ``group`` other than this one (from /proc)."""
    found = []
    try:
        entries = list(os.scandir("/proc"))
    except OSError:  # no /proc: nothing to list
        return found
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == group:  # state, ppid, pgrp
            found.append(int(entry.name))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slca.processes", description=__doc__)
    parser.add_argument("--parent", type=int, required=True, help="PID whose death stops it")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- command and arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    return supervise(args.parent, command)


if __name__ == "__main__":
    raise SystemExit(main())


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_signals_wait() -> Iterator[None]:
    """A stop signal (SIGINT, SIGTERM) that arrives inside the block is handled when the
    block ends, by the handler that was in place (``KeyboardInterrupt``, Prefect's
    ``TerminationSignal``, :func:`end_like_ctrl_c`'s); a second one is handled at once,
    so a hung call still gives way to a repeated Ctrl-C.

    For calls into the tracking store: an exception raised in the middle of a SQLite
    read keeps its cursor alive in the traceback, and with it a shared lock, so the
    cleanup's write (the run ending KILLED) waited 20 s for ``database is locked`` and
    left the run RUNNING. Outside the main thread (where Python delivers no signal) the
    block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, Any]] = []
    # None: a handler installed outside Python, which cannot be put back; left alone
    previous = {sig: h for sig in STOP_SIGNALS if (h := signal.getsignal(sig)) is not None}

    def hold(signum: int, frame: Any) -> None:
        held.append((signum, frame))
        if len(held) > 1:  # a second stop: no more waiting
            _handle(previous[signum], signum, frame)

    for sig in previous:
        signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if len(held) == 1:
            signum, frame = held[0]
            _handle(previous[signum], signum, frame)


def _handle(handler: Any, signum: int, frame: Any) -> None:
    """What the process would have done on ``signum`` with ``handler`` installed."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
    # SIG_IGN, or None (a handler not installed from Python): nothing to do


def stopped_from_outside(exc: BaseException | None) -> bool:
    """Whether ``exc`` ends a run stopped from outside rather than by an error.

    A ``BaseException`` that is no ``Exception`` (Ctrl-C, SIGTERM under
    :func:`slca.processes.end_like_ctrl_c`, Prefect's ``TerminationSignal``) is a stop;
    so is an error raised while one was being handled: Prefect 3.7 turns a SIGTERM that
    lands while a task run is being created into ``ValueError('Task run is not set')``,
    with the ``TerminationSignal`` as its context.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if not isinstance(exc, Exception):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
