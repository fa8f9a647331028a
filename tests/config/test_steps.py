"""The model-building sections (slca/config/steps.py): ``pretrain``'s settings and their
checks, and ``base_model`` kind ``pretrained``."""

from __future__ import annotations

from pathlib import Path

import pytest

from slca.config import ConfigError, load_section, parse_section
from slca.config.data import PrepareParams
from slca.config.steps import BaseModelParams, PretrainParams

PARAMS = Path(__file__).resolve().parents[2] / "params.yaml"


def pretrain(**values) -> PretrainParams:
    return parse_section({"pretrain": values}, "pretrain", PretrainParams, "p.yaml")


def test_the_defaults_describe_the_shipped_base():
    p = PretrainParams()
    assert (p.heldout_dir, p.out_dir, p.corpus) == ("data/tasks", "assets/demo-base", None)
    assert p.synth.values == "wide" and p.synth.n_tasks > PrepareParams().synth.n_tasks
    assert p.seed != PrepareParams().seed  # its own draws, not the demo's tasks
    assert p.snapshot_dir is None
    assert load_section(PARAMS, "pretrain", PretrainParams) == p


def test_a_partial_synth_mapping_keeps_the_corpus_defaults():
    """``-S pretrain.synth.n_tasks=500`` (or a params file that names one key) still
    generates wide values, and ``values`` alone the corpus's number of tasks."""
    assert pretrain(synth={"n_tasks": 500}).synth.values == "wide"
    assert pretrain(synth={"values": "demo"}).synth.n_tasks == PretrainParams().synth.n_tasks
    assert pretrain(synth={"domains": ["weather"]}).synth.model_dump() == {
        **PretrainParams().synth.model_dump(),
        "domains": ["weather"],
    }


@pytest.mark.parametrize(
    "values, message",
    [
        ({"vocab_size": 10}, "pretrain.vocab_size: Input should be greater than or equal to 300"),
        ({"epochs": 0}, "pretrain.epochs: Input should be greater than or equal to 1"),
        ({"max_weight_mb": 0}, "pretrain.max_weight_mb: Input should be greater than 0"),
        ({"min_lr_ratio": 2}, "pretrain.min_lr_ratio: Input should be less than or equal to 1"),
        ({"snapshot_every": 0}, "pretrain.snapshot_every: Input should be greater than or equal"),
        ({"synth": {"values": "narrow"}}, "pretrain.synth.values: Input should be 'demo' or"),
        ({"synth": {"n_tasks": 0}}, "pretrain.synth.n_tasks: Input should be greater than 0"),
        ({"synth": {"domains": ["stocks"]}}, "pretrain.synth.domains"),
        ({"nosuch": 1}, "pretrain.nosuch: Extra inputs are not permitted"),
        ({"lr": True}, "pretrain.lr: expected a number, got the boolean true"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_key(values, message):
    with pytest.raises(ConfigError) as exc:
        pretrain(**values)
    text = str(exc.value)
    assert "\n" not in text and text.startswith("p.yaml: ") and message in text, text


def test_the_recipe_in_a_card_loads_back():
    p = pretrain(synth={"n_tasks": 40}, hidden_size=32, snapshot_dir="/tmp/s")
    recipe = p.model_dump(mode="json", exclude={"snapshot_dir", "snapshot_every"})
    assert PretrainParams.model_validate(recipe) == p.model_copy(update={"snapshot_dir": None})


def test_base_model_kind_pretrained_reads_the_shipped_directory():
    p = BaseModelParams(kind="pretrained")
    assert p.pretrained_dir == "assets/demo-base"
    with pytest.raises(ValueError, match="chat_template 'own' applies to kinds smollm2 and path"):
        BaseModelParams(kind="pretrained", chat_template="own")
    with pytest.raises(ValueError, match="path applies to kind 'path' only"):
        BaseModelParams(kind="pretrained", path="/models/x")
