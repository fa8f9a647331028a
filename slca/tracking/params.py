"""A run's configuration as MLflow params: flattened to dotted keys, values as strings
within MLflow's limits."""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from typing import Any

import numpy as np

MAX_PARAM_VALUE_LENGTH = 6000
"""MLflow's limit on a param value; longer values are truncated (the config artifact
keeps them whole)."""
MAX_KEY_LENGTH = 250
TRUNCATION_SUFFIX = "...[truncated]"


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings to one level with dotted keys; leaves (lists included) kept as is.

    An empty mapping is a leaf (``{}``), so no key disappears.
    """
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise TypeError(f"config key {prefix}{key!r}: keys must be strings")
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, prefix=name + "."))
        else:
            flat[name] = value
    return flat


def param_value(value: Any) -> str:
    """A value as a param string: containers as sorted JSON, truncated past MLflow's limit."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, (Mapping, list, tuple)):
        text = json.dumps(plain(value), sort_keys=True, default=str)
    else:
        text = str(value)
    if len(text) > MAX_PARAM_VALUE_LENGTH:
        text = text[: MAX_PARAM_VALUE_LENGTH - len(TRUNCATION_SUFFIX)] + TRUNCATION_SUFFIX
    return text


def plain(value: Any) -> Any:
    """Config values as plain YAML/JSON data (paths and other objects as strings)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def run_params(
    config: Mapping[str, Any], *, commit: str, dirty: bool | None, hashes: Mapping[str, str]
) -> dict[str, str]:
    """What a run logs as params: every config leaf (dotted keys), ``git.commit``,
    ``git.dirty`` and ``data_hash.<name>``, as strings; a key over MLflow's length limit
    is refused."""
    params = {k: param_value(v) for k, v in flatten_config(config).items()}
    params["git.commit"] = commit
    params["git.dirty"] = "unknown" if dirty is None else str(dirty).lower()
    for name, digest in hashes.items():
        params[f"data_hash.{name}"] = param_value(digest)
    for key in params:
        if len(key) > MAX_KEY_LENGTH:
            raise ValueError(
                f"config key {key[:80]!r}… is {len(key)} characters; MLflow allows {MAX_KEY_LENGTH}"
            )
    return params


def step_number(step: Any) -> int:
    """``step`` as a metric step: an integer >= 0 (``TypeError``/``ValueError`` else)."""
    try:
        value = operator.index(step)
    except TypeError:
        raise TypeError(f"step must be an integer, got {step!r}") from None
    if value < 0:
        raise ValueError(f"step must be >= 0, got {value}")
    return value
