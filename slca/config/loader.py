"""Reading params.yaml strictly: the loader every entry point shares.

Light on purpose (yaml and pydantic only, no torch), so the data stages can use it.
What it refuses, each as one line naming the file, the key and the constraint
(:class:`ConfigError`):

- a key given twice in one mapping (YAML would silently keep the last one);
- a section, in the file or in a ``-S section.key=value`` override, that is none of
  :data:`SECTIONS` (``trian.steps`` must not be ignored);
- a boolean where a number belongs (pydantic's lax mode reads ``true`` as 1);
- a non-finite float (``.inf``, ``.nan``, or ``"inf"`` read as a float);
- anything the section's model refuses.

A preset (``--preset NAME``: ``configs/presets/NAME.yaml`` or a YAML path) is a params
overlay: :func:`with_preset` turns it into dotted overrides applied before the ``-S``
ones, so the flows, which re-read the params file, get it with the overrides.
"""

from __future__ import annotations

import argparse
import copy
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

SECTIONS = (
    "prepare",
    "validate",
    "simulator_check",
    "pretrain",
    "base_model",
    "sft",
    "summary_rm",
    "train",
    "evaluate",
)
"""The params.yaml sections the stages, flows and the ``slca`` command read."""

PRESETS_DIR = Path(__file__).resolve().parents[2] / "configs" / "presets"
"""The presets kept in the repository (``<name>.yaml``): params overlays per hardware
class, applied on top of params.yaml and under ``-S`` (:func:`preset_overrides`)."""

Model = TypeVar("Model", bound=BaseModel)


class ConfigError(ValueError):
    """A config file failed validation; the message names the file, key and constraint."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key that appears twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicate keys."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def _yaml_error(path: Path, exc: yaml.YAMLError) -> ConfigError:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"line {mark.line + 1}: " if mark is not None else ""
    return ConfigError(f"{path}: cannot read YAML: {where}{problem}")


def _sections(path: Path, sections: tuple[str, ...]) -> dict[str, Any]:
    """The YAML mapping at ``path``, each of its keys one of ``sections``."""
    try:
        document = load_yaml(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: expected a mapping of sections")
    for name in document:
        if name not in sections:
            raise ConfigError(f"{path}: unknown section {name!r}; known: {', '.join(sections)}")
    return document


def read_params(
    path: str | Path,
    overrides: Mapping[str, Any] | None = None,
    sections: tuple[str, ...] = SECTIONS,
) -> dict[str, Any]:
    """The YAML document at ``path`` with dotted ``overrides`` applied
    (``{"train.steps": 4}``, as DVC's ``-S train.steps=4``); every section, in the file
    and in the overrides, must be one of ``sections``."""
    path = Path(path)
    document = _sections(path, sections)
    known = ", ".join(sections)
    for key, value in (overrides or {}).items():
        *parents, leaf = key.split(".")
        if key.split(".")[0] not in sections:
            raise ConfigError(
                f"{path}: override {key!r}: unknown section {key.split('.')[0]!r}; known: {known}"
            )
        node = document
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{path}: override {key!r}: {part!r} is not a mapping")
        node[leaf] = value
    return document


def preset_names() -> list[str]:
    """The presets in :data:`PRESETS_DIR`, by name."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def preset_path(preset: str | Path) -> Path:
    """A preset's file: ``<name>`` in :data:`PRESETS_DIR`, or a path to a YAML file."""
    given = Path(preset)
    if given.suffix in (".yaml", ".yml") or len(given.parts) > 1:
        if given.is_file():
            return given
        raise ConfigError(f"preset {str(preset)!r}: no such file")
    path = PRESETS_DIR / f"{preset}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"unknown preset {str(preset)!r}; known: {', '.join(preset_names()) or 'none'} "
            f"({PRESETS_DIR}), or a path to a YAML file"
        )
    return path


def preset_overrides(preset: str | Path, sections: tuple[str, ...] = SECTIONS) -> dict[str, Any]:
    """A preset (see :func:`preset_path`) as dotted overrides, one per leaf: applied
    before ``-S``, they deep-merge the preset into the params file (mappings merge, any
    other value, lists included, replaces)."""
    path = preset_path(preset)
    document = _sections(path, sections)
    out: dict[str, Any] = {}

    def flatten(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and value:
                flatten(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = copy.deepcopy(value)

    for name, values in document.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: section {name!r}: expected a mapping")
        flatten(values, f"{name}.")
    return out


def with_preset(preset: str | Path | None, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``overrides`` (``-S``) on top of ``preset``'s (none: ``overrides`` alone), as one
    dict of dotted overrides for :func:`read_params`: the preset's keys first, then the
    ``-S`` keys, so an ``-S`` key wins over the preset, at the same key or above it."""
    given = dict(overrides or {})
    if preset is None or str(preset) == "":
        return given
    merged = {k: v for k, v in preset_overrides(preset).items() if k not in given}
    return {**merged, **given}


def parse_section(
    document: Mapping[str, Any], section: str, model: type[Model], path: str | Path
) -> Model:
    """Validate ``section`` (dotted names nest) of a params document into ``model``;
    a missing section gives the defaults; errors name the file, key and constraint,
    all on one line."""
    data: Any = document
    for part in section.split("."):
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: {section}: expected a mapping at {part!r}")
        data = data.get(part) or {}
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe(exc, section)}") from None
    problems = _value_problems(data, parsed.model_dump(by_alias=True), section)
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    return parsed


def describe(exc: ValidationError, prefix: str = "") -> str:
    """A pydantic error as one line: ``key.path: message`` per error, ``; ``-joined."""
    parts = []
    for error in exc.errors():
        key = ".".join([prefix, *map(str, error["loc"])] if prefix else map(str, error["loc"]))
        message = str(error["msg"]).removeprefix("Value error, ").replace("\n", " ")
        parts.append(f"{key}: {message}" if key else message)
    return "; ".join(parts)


def _value_problems(given: Any, parsed: Any, key: str) -> list[str]:
    """Booleans read as numbers and non-finite floats, where ``given`` (the document)
    put them: pydantic accepts both in lax mode."""
    if isinstance(given, Mapping):
        if not isinstance(parsed, Mapping):
            return []
        return [
            problem
            for name, value in given.items()
            if name in parsed
            for problem in _value_problems(value, parsed[name], f"{key}.{name}")
        ]
    if isinstance(given, list):
        if not isinstance(parsed, list | tuple) or len(parsed) != len(given):
            return []
        return [
            problem
            for i, (value, out) in enumerate(zip(given, parsed))
            for problem in _value_problems(value, out, f"{key}[{i}]")
        ]
    if isinstance(given, bool) and isinstance(parsed, int | float) and not isinstance(parsed, bool):
        return [f"{key}: expected a number, got the boolean {str(given).lower()}"]
    if isinstance(parsed, float) and not math.isfinite(parsed):
        return [f"{key}: must be a finite number, got {given!r}"]
    return []


def load_section(
    path: str | Path, section: str, model: type[Model], overrides: Mapping[str, Any] | None = None
) -> Model:
    """``section`` of the params file at ``path`` (with ``overrides``) as ``model``."""
    return parse_section(read_params(path, overrides), section, model, path)


def parse_override(text: str) -> tuple[str, Any]:
    """``"train.steps=4"`` → ``("train.steps", 4)``; the value is read as YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {text!r}: expected key=value (e.g. train.steps=4)")
    try:
        return key.strip(), load_yaml(value)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"override {text!r}: {problem}") from None


def add_override_option(parser: argparse.ArgumentParser, example: str) -> None:
    """The stage CLIs' repeatable ``-S/--set KEY=VALUE`` and ``--preset NAME`` (read
    together with :func:`overrides_of`)."""
    parser.add_argument(
        "--preset",
        default=None,
        metavar="NAME",
        help=f"apply a preset ({PRESETS_DIR}/<NAME>.yaml, or a YAML path) on top of the "
        "params file, under -S",
    )
    parser.add_argument(
        "-S",
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a param, as dvc exp run -S ({example}); repeatable",
    )


def overrides_of(args: argparse.Namespace) -> dict[str, Any]:
    """The ``-S`` overrides of parsed arguments, by dotted key, on top of their
    ``--preset``'s (see :func:`with_preset`)."""
    overrides = dict(parse_override(text) for text in args.set)
    return with_preset(getattr(args, "preset", None), overrides)


def stage_parser(prog: str, example: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A stage CLI's parser: ``--params``, ``--preset`` and the repeatable ``-S`` (read
    the section with :func:`load_stage_section`); ``kwargs`` go to
    :class:`argparse.ArgumentParser`."""
    parser = argparse.ArgumentParser(prog=prog, **kwargs)
    parser.add_argument("--params", default="params.yaml", help="params file (default %(default)s)")
    add_override_option(parser, example)
    return parser


def load_stage_section(args: argparse.Namespace, section: str, model: type[Model]) -> Model:
    """``section`` of the parsed arguments' params file, with their ``-S`` overrides."""
    return load_section(args.params, section, model, overrides_of(args))
