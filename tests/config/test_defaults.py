"""One source of truth for defaults: every value params.yaml sets is its section model's
default, so a params file that omits a key or a whole section trains what README and
the demo describe (not an older setup); and dvc.lock records params.yaml's values.

"The default" of a key is what its section resolves to when the key is left out of
params.yaml: the field's default, a parent's ``default_factory`` and the model's
validators (``train.estimator``, the ``{estimator}`` templates) all applied. Only keys
whose field is a model are walked into; a dict or list field is one value.
"""

from __future__ import annotations

import copy
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from slca.config import SECTIONS, load_section, parse_section
from slca.config.data import PrepareParams, ValidateParams
from slca.config.evaluate import EvaluateParams
from slca.config.simulator import SimulatorCheckParams
from slca.config.steps import BaseModelParams, PretrainParams, SFTParams, SummaryRMParams
from slca.config.train import TrainConfig

REPO = Path(__file__).resolve().parents[2]
PARAMS = REPO / "params.yaml"
LOCK = REPO / "dvc.lock"

MODELS: dict[str, type[BaseModel]] = {
    "prepare": PrepareParams,
    "validate": ValidateParams,
    "simulator_check": SimulatorCheckParams,
    "pretrain": PretrainParams,
    "base_model": BaseModelParams,
    "sft": SFTParams,
    "summary_rm": SummaryRMParams,
    "train": TrainConfig,
    "evaluate": EvaluateParams,
}
"""Each params.yaml section's model (what the stages load it with)."""

ONLY_IN_PARAMS_YAML: dict[str, str] = {
    # "section.key": "why a stage must name it in params.yaml with a value unlike the
    # code's default",
}
"""Keys whose params.yaml value may differ from the code's default, each with its
reason. Keep it empty unless a stage truly cannot share the default: DVC's must-name
keys (dvc.yaml's ``params:`` and ``${...}``, such as ``train.estimator`` or
``train.simulator.backend``) need the key written, not another value."""


def params_document() -> dict[str, Any]:
    return yaml.safe_load(PARAMS.read_text())


def submodel(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    """The model class of ``model``'s field ``key`` (also inside ``X | None``); None for a
    field of any other type (a dict or list is one value) or an unknown key."""
    field = model.model_fields.get(key)
    if field is None:
        return None
    annotation = field.annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = options[0] if len(options) == 1 else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def keys(data: dict[str, Any], model: type[BaseModel], prefix: tuple[str, ...] = ()):
    """``(path, value, is_leaf)`` of every key of ``data``, walking into the mappings
    whose field is a model (after their own keys); any other value is a leaf."""
    for key, value in data.items():
        child = submodel(model, key)
        if child is not None and isinstance(value, dict) and value:
            yield from keys(value, child, (*prefix, key))
            yield (*prefix, key), value, False
        else:
            yield (*prefix, key), value, True


def at(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def without(data: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    *parents, leaf = path
    del at(data, tuple(parents))[leaf]
    return data


def resolved(section: str, data: dict[str, Any]) -> dict[str, Any]:
    """``section`` loaded from ``data`` as the stages load it, as JSON values."""
    return parse_section({section: data}, section, MODELS[section], PARAMS).model_dump(mode="json")


def test_every_section_has_its_model_here():
    assert set(MODELS) == set(SECTIONS)


def test_every_value_in_params_yaml_is_the_code_default():
    """For every key of params.yaml, the section resolved without that key holds the same
    value as with it; fails listing every difference. A mapping (``train.rollout``) is
    listed only when none of its keys is: its model's default_factory differs."""
    differences = []
    for section, data in params_document().items():
        full = resolved(section, data)
        for path, value, is_leaf in keys(data, MODELS[section]):
            key = ".".join((section, *path))
            default = at(resolved(section, without(data, path)), path)
            if at(full, path) == default or key in ONLY_IN_PARAMS_YAML:
                continue
            if is_leaf or not any(f": {key}." in line for line in differences):
                differences.append(
                    f"{PARAMS.name}: {key}: yaml {value!r}, code default {default!r}"
                )
    assert not differences, "params.yaml differs from the code defaults:\n" + "\n".join(differences)


def test_the_allow_list_names_only_keys_that_differ():
    """An entry of ONLY_IN_PARAMS_YAML whose key matches the default is stale."""
    document = params_document()
    for key in ONLY_IN_PARAMS_YAML:
        section, *path = key.split(".")
        data = document[section]
        assert at(resolved(section, data), tuple(path)) != at(
            resolved(section, without(data, tuple(path))), tuple(path)
        ), f"{key} equals the code default: drop it from ONLY_IN_PARAMS_YAML"


@pytest.mark.parametrize("section", list(params_document()))
def test_a_params_file_without_a_section_resolves_as_params_yaml(tmp_path, section):
    """A section left out resolves to the one params.yaml writes (README's setup)."""
    document = params_document()
    if any(key.split(".")[0] == section for key in ONLY_IN_PARAMS_YAML):
        pytest.skip(f"{section} sets a key of ONLY_IN_PARAMS_YAML")
    partial = {name: data for name, data in document.items() if name != section}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(partial, sort_keys=False))
    omitted, full = (load_section(p, section, MODELS[section]) for p in (path, PARAMS))
    given, default = (
        flat(full.model_dump(mode="json"), section),
        flat(omitted.model_dump(mode="json"), section),
    )
    differences = [
        f"{key}: params.yaml {given.get(key)!r}, without the section {default.get(key)!r}"
        for key in sorted(set(given) | set(default))
        if given.get(key) != default.get(key)
    ]
    assert not differences, "\n".join(differences)
    assert omitted == full


def test_a_partial_engine_keeps_its_stage_learning_rate():
    """An ``engine`` or ``optim`` mapping that omits ``lr`` gets the stage's rate, not the
    shared optimizer class's."""
    document = params_document()
    for section in ("sft", "train"):
        lr = document[section]["engine"]["optim"]["lr"]
        for engine in ({"bf16": False}, {"optim": {"warmup_steps": 2}}):
            loaded = parse_section({section: {"engine": engine}}, section, MODELS[section], PARAMS)
            assert loaded.engine.optim.lr == lr, (section, engine)


def flat(value: Any, prefix: str) -> dict[str, Any]:
    """A nested mapping as ``{dotted key: leaf}`` (lists are leaves)."""
    if isinstance(value, dict) and value:
        return {k: v for key, sub in value.items() for k, v in flat(sub, f"{prefix}.{key}").items()}
    return {prefix: value}


def test_dvc_lock_records_the_values_of_params_yaml():
    """Each stage's ``params: params.yaml:`` in dvc.lock equals params.yaml's values for
    those keys (a stale lock means ``dvc status`` reports the stage changed and the
    outputs in the cache were made with other parameters)."""
    document = params_document()
    lock = yaml.safe_load(LOCK.read_text())
    differences = []
    for stage, entry in lock["stages"].items():
        recorded = entry.get("params", {}).get("params.yaml", {})
        for key, value in recorded.items():
            try:
                current = at(document, tuple(key.split(".")))
            except (KeyError, TypeError):
                differences.append(f"{stage}: {key}: in dvc.lock, not in params.yaml")
                continue
            locked, now = flat(value, key), flat(current, key)
            for leaf in sorted(set(locked) | set(now)):
                if locked.get(leaf, "<absent>") != now.get(leaf, "<absent>"):
                    differences.append(
                        f"{stage}: {leaf}: dvc.lock {locked.get(leaf, '<absent>')!r}, "
                        f"params.yaml {now.get(leaf, '<absent>')!r}"
                    )
    assert not differences, "dvc.lock is stale (relock it):\n" + "\n".join(differences)
