"""Machine faults in one line that names the path and the setting (slca.faults): known
answers for each kind, the chain searched, everything else untouched. A real full disk
under a training run: tests/training/test_session.py."""

import errno
import sqlite3

import pytest

from slca.faults import FaultError, fault_reason, naming_the_place


def raised_from(outer: Exception, inner: BaseException) -> Exception:
    try:
        try:
            raise inner
        except BaseException as cause:
            raise outer from cause
    except Exception as exc:
        return exc


@pytest.mark.parametrize(
    "exc, says",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "the disk is full"),
        (RuntimeError("[enforce fail at inline_container.cc:672] unexpected pos 64"), "full"),
        (raised_from(RuntimeError("save failed"), OSError(errno.ENOSPC, "x")), "full"),
        (sqlite3.OperationalError("database or disk is full"), "the disk is full"),
        (OSError(errno.EROFS, "Read-only file system"), "not writable"),
        (PermissionError(errno.EACCES, "Permission denied"), "not writable"),
        (sqlite3.DatabaseError("database disk image is malformed"), "damaged"),
        (sqlite3.DatabaseError("file is not a database"), "damaged"),
        (sqlite3.OperationalError("database is locked"), "locked by another process"),
    ],
)
def test_each_fault_is_named_with_its_setting(exc, says):
    reason = fault_reason(exc, "train.checkpoint_dir")
    assert says in reason and "\n" not in reason
    if "full" in says or "writable" in says:
        assert "train.checkpoint_dir" in reason


def test_other_errors_pass_through_unchanged(tmp_path):
    assert fault_reason(ValueError("bad value"), "x") is None
    with pytest.raises(KeyError), naming_the_place(tmp_path, "train.out_dir"):
        raise KeyError("k")


def test_the_fault_keeps_its_cause_for_debug(tmp_path):
    original = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(FaultError) as caught, naming_the_place(tmp_path, "train.out_dir"):
        raise original
    assert str(caught.value).startswith(f"train.out_dir {tmp_path}: the disk is full")
    assert caught.value.__cause__ is original
