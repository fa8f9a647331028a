"""``base_model.kind: path`` and ``base_model.chat_template``: a user's checkpoint keeps
its own chat template only when it serves the tool loop (a tiny checkpoint written
here stands for the user's)."""

import logging

import pytest

from slca.config import ConfigError
from slca.config.steps import BaseModelParams
from slca.modeling import load_tokenizer
from slca.rollout.chat import HERMES_TEMPLATE
from slca.training.stages import build_base_model
from slca.training.tiny import tiny_model, train_tokenizer

# Hermes without its tool-message branch: tools reach the prompt, tool turns vanish
DROPS_TOOL_TURNS = HERMES_TEMPLATE.replace("message.role == 'tool'", "message.role == 'ipython'")
OWN_GOOD = HERMES_TEMPLATE + "{#- the checkpoint's own #}"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """``write(template) -> path`` of a tiny HF checkpoint with that chat template."""
    tokenizer = train_tokenizer(["what is the weather in Rome", "get_weather city"] * 20, 300)
    model = tiny_model(tokenizer, hidden_size=32, num_hidden_layers=1)
    root = tmp_path_factory.mktemp("user-checkpoints")

    def write(name, template):
        tokenizer.chat_template = template
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        return root / name

    return write


def build(tmp_path, path, choice):
    out = tmp_path / f"base-{choice}"
    return build_base_model(
        BaseModelParams(kind="path", path=str(path), chat_template=choice, out_dir=str(out))
    )


def test_auto_keeps_a_passing_template_and_replaces_a_failing_one_with_one_line(
    checkpoint, tmp_path, caplog
):
    good, bad = checkpoint("good", OWN_GOOD), checkpoint("bad", DROPS_TOOL_TURNS)
    with caplog.at_level(logging.WARNING, logger="slca.training.stages"):
        assert load_tokenizer(build(tmp_path / "a", good, "auto")).chat_template == OWN_GOOD
        assert not caplog.records
        out = build(tmp_path / "b", bad, "auto")
    assert load_tokenizer(out).chat_template == HERMES_TEMPLATE
    (record,) = caplog.records
    assert record.getMessage() == (
        f"base_model.chat_template auto: the chat template of {bad} drops tool turns "
        "(a tool message's content is not rendered); using the Hermes template instead"
    )


def test_own_stops_in_one_line_and_writes_nothing(checkpoint, tmp_path):
    bad = checkpoint("bad", DROPS_TOOL_TURNS)
    with pytest.raises(ConfigError) as raised:
        build(tmp_path, bad, "own")
    message = str(raised.value)
    assert "\n" not in message and str(bad) in message
    assert "set -S base_model.chat_template=hermes" in message
    assert not (tmp_path / "base-own").exists()


def test_hermes_always_writes_the_hermes_template(checkpoint, tmp_path):
    good = checkpoint("good", OWN_GOOD)
    assert load_tokenizer(build(tmp_path, good, "hermes")).chat_template == HERMES_TEMPLATE


def test_the_settings_refuse_what_does_not_apply():
    with pytest.raises(ValueError, match="path is required when kind is 'path'"):
        BaseModelParams(kind="path")
    with pytest.raises(ValueError, match="path applies to kind 'path' only"):
        BaseModelParams(kind="smollm2", path="/models/x")
    with pytest.raises(ValueError, match="chat_template 'own' applies to kinds smollm2 and path"):
        BaseModelParams(kind="tiny", chat_template="own")
    with pytest.raises(ValueError, match="chat_template"):
        BaseModelParams(kind="path", path="/x", chat_template="chatml")
