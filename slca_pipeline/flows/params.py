"""Flow parameters: the params file, dotted overrides, and validation before any work."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from slca.advantages import available_estimators
from slca.config import SECTIONS, ConfigError, parse_section, read_params

__all__ = ["SECTIONS", "read_document", "section"]
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


def section(
    document: dict[str, Any], name: str, model: type[Model], params_file: str | Path
) -> Model:
    """Validate one section; a bad value raises :class:`ConfigError` naming file and key."""
    return parse_section(document, name, model, params_file)
