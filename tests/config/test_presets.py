"""Presets (configs/presets/): params overlays per hardware class, applied on top of
params.yaml and under ``-S``, through the loader every entry point uses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slca.config import ConfigError, overrides_of, parse_section, read_params
from slca.config.data import PrepareParams, ValidateParams
from slca.config.evaluate import EvaluateParams
from slca.config.loader import (
    PRESETS_DIR,
    load_yaml,
    preset_names,
    preset_overrides,
    stage_parser,
    with_preset,
)
from slca.config.steps import BaseModelParams, PretrainParams, SFTParams, SummaryRMParams
from slca.config.train import TrainConfig
from slca_pipeline.flows.params import read_document

PARAMS = Path(__file__).resolve().parents[2] / "params.yaml"
PRESET_FILES = sorted(PRESETS_DIR.glob("*.yaml"))
SECTION_MODELS = {
    "prepare": PrepareParams,
    "validate": ValidateParams,
    "pretrain": PretrainParams,
    "base_model": BaseModelParams,
    "sft": SFTParams,
    "summary_rm": SummaryRMParams,
    "train": TrainConfig,
    "evaluate": EvaluateParams,
}
CHECKPOINT = {"base_model.path": "/models/my-checkpoint"}


def needs_a_path(path: Path) -> bool:
    return (load_yaml(path.read_text()) or {}).get("base_model", {}).get("kind") == "path"


def validate_all(document):
    from slca.simulator.check import check_params

    parsed = {
        name: parse_section(document, name, model, PARAMS) for name, model in SECTION_MODELS.items()
    }
    check_params(document, PARAMS)  # simulator_check, against train.simulator
    return parsed


def one_line(exc) -> str:
    text = str(exc)
    assert "\n" not in text.strip(), text
    return text


def test_the_documented_presets_exist():
    assert {"cpu-tiny", "cpu-smollm2", "gpu-1x-1b", "gpu-8x-7b"} <= set(preset_names())


@pytest.mark.parametrize("path", PRESET_FILES, ids=lambda p: p.stem)
def test_every_preset_loads_and_validates_every_section(path):
    overrides = with_preset(path.stem, CHECKPOINT if needs_a_path(path) else {})
    parsed = validate_all(read_document(PARAMS, overrides))  # as the slca command reads
    # every leaf the preset sets is what the section holds
    for key, value in preset_overrides(path.stem).items():
        if key in overrides and overrides[key] != value:  # base_model.path, given here
            continue
        section, *rest = key.split(".")
        node = parsed[section].model_dump()
        for part in rest:
            node = node[part]
        assert node == value or (isinstance(value, list) and list(node) == value), key
    # the DVC stages' parser reads the same: --preset then -S
    given = [f"-S{k}={v}" for k, v in CHECKPOINT.items() if needs_a_path(path)]
    args = stage_parser("stage", "x=1").parse_args(["--preset", path.stem, *given])
    assert overrides_of(args) == overrides


@pytest.mark.parametrize("path", PRESET_FILES, ids=lambda p: p.stem)
def test_every_preset_documents_hardware_memory_and_sources(path):
    header = "\n".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    assert path.read_text().startswith(f"# {path.stem}: ")
    assert "Hardware" in header or "GPU" in header
    assert "Memory" in header and ("(measured" in header or "(estimated" in header)
    assert "Sources of the settings" in header or "Settings: none" in header


@pytest.mark.parametrize("path", [p for p in PRESET_FILES if needs_a_path(p)], ids=lambda p: p.stem)
def test_a_path_preset_without_its_checkpoint_stops_in_one_line(path):
    document = read_document(PARAMS, with_preset(path.stem, {}))
    with pytest.raises(ConfigError) as raised:
        parse_section(document, "base_model", BaseModelParams, PARAMS)
    message = one_line(raised.value)
    assert "base_model: path is required when kind is 'path'" in message
    assert "-S base_model.path=" in message


def test_an_unknown_preset_stops_in_one_line_listing_the_known_ones():
    with pytest.raises(ConfigError) as raised:
        with_preset("gpu-9x-900b", {})
    message = one_line(raised.value)
    assert "unknown preset 'gpu-9x-900b'" in message
    assert "cpu-tiny, gpu-1x-1b" in message.replace("cpu-smollm2, ", "")
    with pytest.raises(ConfigError, match="no such file"):
        with_preset("nowhere/mine.yaml", {})


def test_an_override_wins_over_the_preset_at_its_key_and_above_it():
    overrides = with_preset(
        "gpu-1x-1b",
        {**CHECKPOINT, "train.engine.optim.lr": 3e-6, "train.rollout": {"group_size": 4}},
    )
    train = parse_section(read_document(PARAMS, overrides), "train", TrainConfig, PARAMS)
    assert train.engine.optim.lr == 3e-6  # -S at the preset's key
    assert train.engine.engine == "torch" and train.engine.bf16 is True  # the preset's
    assert train.rollout.group_size == 4  # -S above the preset's keys replaces them all
    assert train.rollout.engine == "hf" and train.rollout.tasks_per_step == 8  # params.yaml's
    assert train.steps == 16  # params.yaml's, which the preset leaves alone


def test_a_combination_the_preset_makes_invalid_stops_at_load_in_one_line():
    document = read_document(
        PARAMS, with_preset("gpu-8x-7b", {**CHECKPOINT, "train.engine.engine": "torch"})
    )
    with pytest.raises(ConfigError) as raised:
        parse_section(document, "train", TrainConfig, PARAMS)
    assert "train.engine: zero_stage applies to engine 'deepspeed' only" in one_line(raised.value)
    document = read_document(
        PARAMS, with_preset("gpu-1x-1b", {**CHECKPOINT, "train.update.minibatches": 3})
    )
    with pytest.raises(ConfigError, match="minibatches=3 must divide the 128 rollouts"):
        parse_section(document, "train", TrainConfig, PARAMS)


def test_a_preset_file_merges_deeply_and_replaces_lists(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"prepare": {"sources": ["synth"], "synth": {"n_tasks": 50}}}))
    document = read_params(PARAMS, with_preset(mine, {}))
    prepare = parse_section(document, "prepare", PrepareParams, PARAMS)
    assert prepare.sources == ["synth"]  # the list is replaced, not extended
    assert prepare.synth.n_tasks == 50
    assert prepare.synth.max_parallel == 3 and prepare.seed == 13  # merged: params.yaml's


@pytest.mark.parametrize(
    "text, message",
    [
        ("trian:\n  steps: 4\n", "unknown section 'trian'"),
        ("train: 4\n", "section 'train': expected a mapping"),
        ("train:\n  steps: 1\n  steps: 2\n", "duplicate key 'steps'"),
        ("- train\n", "expected a mapping of sections"),
    ],
)
def test_a_bad_preset_file_stops_in_one_line_naming_it(tmp_path, text, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError) as raised:
        with_preset(bad, {})
    assert message in one_line(raised.value) and str(bad) in str(raised.value)
