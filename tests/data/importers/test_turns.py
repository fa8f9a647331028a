"""The turns a row must get right in every conversational format: a tool result answers
a call of the assistant turn before it, every turn says something; and the turns real
exports write that are read as they mean (OpenAI's ``developer`` role, a tool result
given as JSON data)."""

from __future__ import annotations

import json

import pytest

from slca.data.importers import openai, sharegpt, toucan, verl, xlam
from slca.data.importers.conversation import RowReject, conversation_tasks

TOOL = {
    "name": "get_weather",
    "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
USER = {"role": "user", "content": "Weather in Oslo?"}
CALL = {
    "role": "assistant",
    "tool_calls": [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }
    ],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 4}'}
ANSWER = {"role": "assistant", "content": "4 °C."}


def _openai(*messages):
    return conversation_tasks(
        openai.conversation(
            {"messages": list(messages), "tools": [{"type": "function", "function": TOOL}]}
        ),
        "s",
        "1",
    )


def _reject(make, *args):
    with pytest.raises(RowReject) as e:
        make(*args)
    return e.value.reason, e.value.field, e.value.message


@pytest.mark.parametrize(
    "messages, field, message",
    [
        (
            [{"role": "tool", "name": "get_weather", "content": "4"}, USER, ANSWER],
            "messages[0]",
            "a tool result with no call before it (it is the first turn)",
        ),
        (
            [USER, {"role": "tool", "tool_call_id": "zz", "content": "4"}, ANSWER],
            "messages[1].tool_call_id",
            "'zz' matches no call of the assistant turn before it",
        ),
        (
            [USER, {"role": "tool", "name": "get_weather", "content": "4"}, ANSWER],
            "messages[1]",
            "a tool result with no call before it (it follows a user turn, messages[0])",
        ),
        (
            [USER, ANSWER, {"role": "tool", "name": "get_weather", "content": "4"}, ANSWER],
            "messages[2]",
            "a tool result with no call before it "
            "(it follows an assistant turn that calls nothing, messages[1])",
        ),
        (
            [USER, CALL, {"role": "tool", "tool_call_id": "WRONG", "content": "4"}, ANSWER],
            "messages[2].tool_call_id",
            "'WRONG' matches no call of the assistant turn before it",
        ),
        (
            # an id of an earlier assistant turn's call answers nothing here
            [USER, CALL, RESULT, ANSWER, USER, ANSWER, RESULT],
            "messages[6].tool_call_id",
            "'c1' matches no call of the assistant turn before it",
        ),
        (
            [USER, {"role": "assistant"}],
            "messages[1]",
            "an assistant turn without text or calls",
        ),
        (
            [USER, {"role": "assistant", "content": "  ", "tool_calls": []}],
            "messages[1]",
            "an assistant turn without text or calls",
        ),
        (
            [{"role": "user", "content": ""}, ANSWER],
            "messages[0]",
            "a user turn without text",
        ),
    ],
)
def test_openai_orphan_results_and_empty_turns_are_bad_messages(messages, field, message):
    assert _reject(_openai, *messages) == ("bad_message", field, message)


def test_openai_results_that_answer_the_calls_before_them_are_context():
    second = {**USER, "content": "And tomorrow?"}
    by_name = {"role": "tool", "name": "get_weather", "content": "4"}
    for result in (RESULT, by_name):
        *_, task = _openai(USER, CALL, result, ANSWER, second, ANSWER)
        assert [m.role for m in task.messages] == ["user", "assistant", "tool", "assistant", "user"]
        assert task.messages[2].name == "get_weather"


def test_a_developer_turn_is_a_system_turn():
    (task,) = _openai({"role": "developer", "content": "Answer briefly."}, USER, ANSWER)
    assert [(m.role, m.content) for m in task.messages] == [
        ("system", "Answer briefly."),
        ("user", "Weather in Oslo?"),
    ]


@pytest.mark.parametrize(
    "content, text",
    [
        ({"temp_c": 4, "city": "Zürich"}, '{"temp_c": 4, "city": "Zürich"}'),
        ([{"temp_c": 4}, {"temp_c": 5}], '[{"temp_c": 4}, {"temp_c": 5}]'),
        ([], "[]"),
        (4, "4"),
        ([{"type": "text", "text": "4 °C"}], "4 °C"),  # text parts stay text
        ("4 °C", "4 °C"),
    ],
)
def test_a_tool_result_given_as_json_data_is_its_json_text(content, text):
    second = {**USER, "content": "And tomorrow?"}
    result = {**RESULT, "content": content}
    *_, task = _openai(USER, CALL, result, ANSWER, second, ANSWER)
    assert task.messages[2].content == text


# ShareGPT / Hermes: the same checks, on its own turns
SYSTEM = {"from": "system", "value": f"<tools> {json.dumps([TOOL])} </tools>"}
HUMAN = {"from": "human", "value": "Weather in Oslo?"}
GPT_CALL = {
    "from": "gpt",
    "value": '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>',
}
GPT = {"from": "gpt", "value": "4 °C."}
TOOL_TURN = {"from": "tool", "value": "<tool_response>4</tool_response>"}


def _sharegpt(*turns):
    return conversation_tasks(sharegpt.conversation({"conversations": list(turns)}), "s", "1")


@pytest.mark.parametrize(
    "turns, field, message",
    [
        (
            [SYSTEM, HUMAN, TOOL_TURN, GPT],
            "conversations[2]",
            "a tool result with no call before it (it follows a user turn, conversations[1])",
        ),
        (
            [SYSTEM, HUMAN, GPT, TOOL_TURN, GPT],
            "conversations[3]",
            "a tool result with no call before it "
            "(it follows an assistant turn that calls nothing, conversations[2])",
        ),
        (
            [SYSTEM, HUMAN, {"from": "human", "value": "FUNCTION RESPONSE: 4"}, GPT],
            "conversations[2]",
            "a tool result with no call before it (it follows a user turn, conversations[1])",
        ),
        (
            [SYSTEM, HUMAN, {"from": "gpt", "value": "<|endoftext|>"}],
            "conversations[2]",
            "an assistant turn without text or calls",
        ),
        (
            [SYSTEM, {"from": "human", "value": " "}, GPT],
            "conversations[1]",
            "a user turn without text",
        ),
    ],
)
def test_sharegpt_orphan_results_and_empty_turns_are_bad_messages(turns, field, message):
    assert _reject(_sharegpt, *turns) == ("bad_message", field, message)


def test_sharegpt_results_after_a_call_are_read_and_json_data_is_its_text():
    observation = {"from": "observation", "value": {"temp_c": 4}}
    second = {**HUMAN, "value": "And tomorrow?"}
    *_, task = _sharegpt(SYSTEM, HUMAN, GPT_CALL, observation, GPT, second, GPT)
    assert [(m.role, m.content, m.name) for m in task.messages[2:4]] == [
        ("tool", '{"temp_c": 4}', "get_weather"),
        ("assistant", "4 °C.", None),
    ]


def test_toucan_and_verl_results_must_follow_a_call():
    toucan_row = {
        "tools": json.dumps([{"type": "function", "function": TOOL}]),
        "messages": json.dumps(
            [
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "tool_response", "content": "4"},
                {"role": "assistant", "content": "4 °C."},
            ]
        ),
    }
    assert _reject(lambda: conversation_tasks(toucan.conversation(toucan_row), "s", "1")) == (
        "bad_message",
        "messages[1]",
        "a tool result with no call before it (it follows a user turn, messages[0])",
    )
    verl_row = {
        "prompt": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "Let me think."},
            {"role": "user", "content": "<tool_response>4</tool_response>"},
            {"role": "user", "content": "And now?"},
        ],
        "tools": json.dumps([{"type": "function", "function": TOOL}]),
        "reward_model": {"ground_truth": {"gold_tool_calls": ["get_weather"]}},
    }
    reason, field, _ = _reject(lambda: conversation_tasks(verl.conversation(verl_row), "s", "1"))
    assert (reason, field) == ("bad_message", "prompt[2]")


def test_an_xlam_row_without_answers_is_still_a_no_call_task():
    row = {"id": 1, "query": "Hi there", "tools": json.dumps([TOOL]), "answers": "[]"}
    (task,) = conversation_tasks(xlam.conversation(row), "s", "1")
    assert task.gold == [] and task.answer is None
