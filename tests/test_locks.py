"""One writer at a time: a held lock refuses at once, naming its holder; a killed holder
leaves no stale lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from slca.locks import ExclusiveLock, LockHeld, holder


def hold(path):
    """A process holding the lock at ``path`` until killed; returns it once it holds."""
    script = textwrap.dedent(
        f"""
        import time
        from slca.locks import ExclusiveLock
        with ExclusiveLock({str(path)!r}, what="the test directory"):
            print("held", flush=True)
            time.sleep(600)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_holder_is_refused_at_once_naming_the_first(tmp_path):
    path = tmp_path / "dir" / ".lock"
    first = hold(path)
    try:
        started = time.monotonic()
        with pytest.raises(LockHeld, match=rf"the test directory is in use by PID {first.pid} on"):
            ExclusiveLock(path, what="the test directory").acquire()
        assert time.monotonic() - started < 5  # refused, not waited for
        assert holder(path)["pid"] == first.pid
    finally:
        first.kill()
        first.wait()


def test_kill_minus_nine_of_the_holder_frees_the_lock(tmp_path):
    path = tmp_path / ".lock"
    first = hold(path)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    with ExclusiveLock(path, what="x") as lock:
        assert lock.held and holder(path)["pid"] == os.getpid()
    assert holder(path) is None  # released: the owner note goes with it


def test_a_lock_is_reentrant_for_its_holder_and_released_once(tmp_path):
    lock = ExclusiveLock(tmp_path / ".lock", what="x")
    lock.acquire()
    lock.acquire()
    lock.release()
    assert not lock.held
    with ExclusiveLock(tmp_path / ".lock", what="x"):
        pass
