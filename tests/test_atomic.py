"""The one atomic file writer: all or nothing, no temp file left behind."""

from __future__ import annotations

import os

import pytest

from slca import atomic
from slca.atomic import atomic_write_text


def test_writes_creates_parents_and_replaces(tmp_path):
    path = tmp_path / "a" / "b" / "report.json"
    assert atomic_write_text(path, "one\r\n") == path
    assert path.read_bytes() == b"one\r\n"  # newlines as given, UTF-8
    atomic_write_text(path, "twö\n")
    assert path.read_bytes() == "twö\n".encode()
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.json"]
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "metrics.json"
    atomic_write_text(path, "old\n")
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(path, "half \ud800 written")  # fails inside write()
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_an_interrupt_before_the_rename_leaves_nothing_new(tmp_path, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(tmp_path / "new.md", "text")
    assert list(tmp_path.iterdir()) == []


def test_the_data_reaches_the_disk_before_the_rename(tmp_path, monkeypatch):
    order = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (order.append("fsync"), real_fsync(fd)))
    monkeypatch.setattr(
        atomic.os, "replace", lambda a, b: (order.append("replace"), real_replace(a, b))
    )
    atomic_write_text(tmp_path / "x", "y")
    assert order == ["fsync", "replace"]
