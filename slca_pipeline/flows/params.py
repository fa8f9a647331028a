"""Flow parameters: the params file, dotted overrides, and validation before any work."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from slca.advantages import available_estimators
from slca.config import SECTIONS, ConfigError, parse_section, read_params

__all__ = ["SECTIONS", "load_document", "read_document", "section"]
#: Where Prefect keeps the steps' cache records unless a flow is told otherwise
#: (slca_pipeline/tasks/steps.py).
DEFAULT_STATE_DIR = Path(".slca/flows")

Estimator = Literal[*available_estimators()]  # type: ignore[valid-type]
Model = TypeVar("Model", bound=BaseModel)


def read_document(params_file: str | Path, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """The params file with ``overrides`` (``{"train.steps": 4}``, as DVC's ``-S``) applied."""
    path = Path(params_file)
    if not path.is_file():
        raise ConfigError(f"params_file: {path} is not a file")
    return read_params(path, overrides)  # refuses unknown sections, duplicate keys


def load_document(
    params_file: str | Path, overrides: dict[str, Any] | None, document: dict[str, Any] | None
) -> dict[str, Any]:
    """A subflow's params: the ``document`` its parent flow read (``overrides`` already
    applied), else ``params_file`` read now. The pipeline reads the file once and hands
    every subflow the document, so all its steps run on one reading of it (ADR 0081)."""
    if document is None:
        return read_document(params_file, overrides)
    if overrides:
        raise ConfigError(
            "overrides: apply them when the document is read, not again to a read document"
        )
    return document


def section(
    document: dict[str, Any], name: str, model: type[Model], params_file: str | Path
) -> Model:
    """Validate one section; a bad value raises :class:`ConfigError` naming file and key."""
    return parse_section(document, name, model, params_file)
