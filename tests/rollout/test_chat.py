import pytest

from slca.rollout.chat import (
    HERMES_TEMPLATE,
    ChatRenderer,
    ensure_tool_template,
    openai_tools,
    tool_message,
)

TOOL = {
    "name": "get_weather",
    "description": "Weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "response": {"type": "object"},
}


def test_task_tools_become_openai_functions_without_the_response_schema():
    (tool,) = openai_tools([TOOL])
    assert tool == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather.",
            "parameters": TOOL["parameters"],
        },
    }
    nested = {"type": "function", "function": tool["function"]}
    assert openai_tools([nested]) == [tool]


def test_prompt_lists_tools_in_the_system_turn_and_ends_with_the_generation_prompt(tokenizer):
    renderer = ChatRenderer(tokenizer, [TOOL])
    text = renderer.render(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Rome?"},
        ],
        add_generation_prompt=True,
    )
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '"name": "get_weather"' in text and '"response"' not in text
    assert text.count("Be brief.") == 1
    assert text.endswith("<|im_start|>user\nWeather in Rome?<|im_end|>\n<|im_start|>assistant\n")


def test_environment_tokens_are_the_template_text_between_two_turns(tokenizer):
    renderer = ChatRenderer(tokenizer, [TOOL])
    history = [{"role": "user", "content": "Weather in Rome and Oslo?"}]
    ids = renderer.environment_ids(
        history,
        "<tool_call>…</tool_call>",
        [tool_message("get_weather", {"t": 20}), tool_message("get_weather", {"t": -3})],
    )
    assert tokenizer.decode(ids) == (
        '\n<|im_start|>user\n<tool_response>\n{"t": 20}\n</tool_response>\n'
        '<tool_response>\n{"t": -3}\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
    )


class _NoToolsTokenizer:
    """A chat template that drops tools=, like SmolLM2-135M-Instruct's."""

    chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"

    def apply_chat_template(self, messages, tools=None, tokenize=False, **kwargs):
        from jinja2 import Template

        return Template(self.chat_template).render(messages=messages, tools=tools)


def test_a_template_that_ignores_tools_gets_the_hermes_template(tokenizer):
    plain = _NoToolsTokenizer()
    assert ensure_tool_template(plain) is True
    assert plain.chat_template == HERMES_TEMPLATE
    assert ensure_tool_template(tokenizer) is False  # already renders tools


def test_a_template_that_rewrites_history_is_refused(tokenizer):
    class Rewriting(_NoToolsTokenizer):
        chat_template = (
            "{{ messages | length }}{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}"
        )

    renderer = ChatRenderer(Rewriting(), [TOOL], "<|im_end|>")  # a fake: no special tokens
    with pytest.raises(ValueError, match="growing prefix"):
        renderer.environment_ids([{"role": "user", "content": "x"}], "y", [tool_message("t", {})])


def test_context_turns_render_as_the_policy_would_have_written_them(tokenizer):
    from slca.data.record import TaskRecord
    from slca.rollout.chat import task_messages

    task = TaskRecord.model_validate(
        {
            "id": "t",
            "source": "mine",
            "domain": "d",
            "split": "train",
            "messages": [
                {"role": "user", "content": "Weather in Lima?"},
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [{"name": "get_weather", "arguments": {"city": "Lima"}}],
                },
                {"role": "tool", "name": "get_weather", "content": '{"temp_c": 19}'},
                {"role": "assistant", "content": "19 °C."},
                {"role": "user", "content": "And Quito?"},
            ],
            "tools": [TOOL],
            "gold": [[{"name": "get_weather", "arguments": {"city": "Quito"}}]],
        }
    )
    messages = task_messages(task)
    assert messages[1] == {
        "role": "assistant",
        "content": 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lima"}}'
        "\n</tool_call>",
    }
    assert messages[2] == {"role": "tool", "name": "get_weather", "content": '{"temp_c": 19}'}
    text = ChatRenderer(tokenizer, [TOOL]).render(messages, add_generation_prompt=True)
    assert '<tool_response>\n{"temp_c": 19}\n</tool_response>' in text
    assert text.endswith("<|im_start|>user\nAnd Quito?<|im_end|>\n<|im_start|>assistant\n")
