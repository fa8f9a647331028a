"""The one base of every configuration model, and the checks several sections share.

Torch-free (pydantic only), so the data stages' sections can use it.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown keys are errors (a typo must not silently fall back to a default), a
    loaded configuration is frozen, a non-finite float is refused, and every field's
    attribute docstring is its pydantic description (``model_json_schema()`` documents
    params.yaml)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False
    )


def registered(name: str, names: Iterable[str], what: str) -> str:
    """``name`` unchanged when a registry lists it in ``names``; else an error listing them."""
    names = list(names)
    if name not in names:
        raise ValueError(f"unknown {what} {name!r}; valid: {', '.join(names)}")
    return name


def known_names(given: list[str], known: Iterable[str], what: str) -> list[str]:
    """``given`` unchanged when every name is in ``known``; else an error listing the
    unknown ones and the known ones."""
    known = list(known)
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(f"unknown {what} {unknown}; known: {', '.join(known)}")
    return given


def room_for_a_prompt(max_total_tokens: int, max_new_tokens: int) -> None:
    """A sequence budget must leave room for a prompt beside one policy turn."""
    if max_total_tokens <= max_new_tokens:
        raise ValueError(
            f"max_total_tokens ({max_total_tokens}) must exceed max_new_tokens "
            f"({max_new_tokens}): no task's prompt fits beside one turn"
        )
