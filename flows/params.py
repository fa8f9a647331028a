"""Flow parameters: the params file, dotted overrides, and validation before any work."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from slca.advantages import available_estimators
from slca.config import ConfigError

#: The params.yaml sections the flows read.
SECTIONS = ("prepare", "validate", "simulator_check", "base_model", "sft", "train")
#: Where step records live unless a flow is told otherwise (see tasks/steps.py).
DEFAULT_STATE_DIR = Path(".slca/flows")

Estimator = Literal[*available_estimators()]  # type: ignore[valid-type]
Model = TypeVar("Model", bound=BaseModel)


def read_document(params_file: str | Path, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """The params file with ``overrides`` (``{"train.steps": 4}``, as DVC's ``-S``) applied."""
    path = Path(params_file)
    if not path.is_file():
        raise ConfigError(f"params_file: {path} is not a file")
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"params_file: {path}: cannot read YAML: {exc}") from None
    document = copy.deepcopy(document)
    for key, value in (overrides or {}).items():
        parts = key.split(".")
        if parts[0] not in SECTIONS:
            raise ConfigError(
                f"overrides: {key!r}: unknown section {parts[0]!r}; known: {', '.join(SECTIONS)}"
            )
        node = document
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"overrides: {key!r}: {part!r} is not a mapping")
        node[parts[-1]] = value
    return document


def section(
    document: dict[str, Any], name: str, model: type[Model], params_file: str | Path
) -> Model:
    """Validate one section; a bad value raises :class:`ConfigError` naming file and key."""
    try:
        return model.model_validate(document.get(name) or {})
    except ValidationError as exc:
        lines = [
            f"{params_file}: {'.'.join([name, *(str(p) for p in e['loc'])])}: {e['msg']}"
            for e in exc.errors()
        ]
        raise ConfigError("\n".join(lines)) from None
