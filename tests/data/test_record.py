import hashlib
import json

import pytest
from pydantic import ValidationError

from slca.data import io
from slca.data import record as rec_mod
from slca.data.checks import gold_problems, is_reference, record_problems, schema_problems
from slca.data.record import TaskRecord
from slca.jsonutil import canonical_json


def test_valid_record_round_trips(record):
    r = TaskRecord.model_validate(record)
    assert r.n_calls == 1
    assert TaskRecord.model_validate_json(r.model_dump_json()) == r


def test_exported_schema_matches_model():
    on_disk = json.loads(rec_mod.SCHEMA_PATH.read_text())
    assert on_disk == TaskRecord.model_json_schema()
    assert rec_mod.main(["--check"]) == 0


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"id": ""}, "id"),
        ({"split": "dev"}, "split"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "messages"),
        ({"gold": [[]]}, "gold"),
        ({"tools": "dup"}, "tools"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_structural_errors_name_the_field(over, field, make_record, weather_tool):
    if over.get("tools") == "dup":
        over = {"tools": [weather_tool, weather_tool]}
    with pytest.raises(ValidationError) as e:
        TaskRecord.model_validate(make_record(**over))
    assert field in str(e.value)


def test_gold_must_name_a_tool(make_record):
    bad = make_record(gold=[[{"name": "get_time", "arguments": {}}]])
    with pytest.raises(ValidationError, match="get_time"):
        TaskRecord.model_validate(bad)


def test_eval_only_only_in_eval_split(make_record):
    with pytest.raises(ValidationError, match="eval_only"):
        TaskRecord.model_validate(make_record(eval_only=True, split="train"))
    assert TaskRecord.model_validate(make_record(eval_only=True, split="eval")).eval_only


def test_no_call_task_is_empty_gold(make_record):
    r = TaskRecord.model_validate(make_record(gold=[]))
    assert r.n_calls == 0


def test_parameters_must_be_object_schema(make_record, weather_tool):
    tool = dict(weather_tool, parameters={"type": "string"})
    with pytest.raises(ValidationError, match="object schema"):
        TaskRecord.model_validate(make_record(tools=[tool]))


def test_reference_syntax():
    assert is_reference("$var1.skyId$")
    assert is_reference("$var3$")
    assert is_reference("$var1.coordinates.latitude$")
    assert not is_reference("costs $5 or $6")
    assert not is_reference("var1.skyId")


def test_semantic_checks_pass_on_valid_record(record):
    assert record_problems(record) == []


def test_invalid_json_schema_is_reported(weather_tool):
    tool = dict(weather_tool, response={"type": "nonsense"})
    probs = schema_problems([tool])
    assert len(probs) == 1 and probs[0][0] == "tools[0].response"


def test_argument_type_error_names_call_and_argument(weather_tool):
    probs = gold_problems([weather_tool], [[{"name": "get_weather", "arguments": {"city": 3}}]])
    assert probs and probs[0][0] == "gold[0][0].arguments.city"


def test_missing_required_and_extra_argument(weather_tool):
    probs = gold_problems([weather_tool], [[{"name": "get_weather", "arguments": {"town": "x"}}]])
    msgs = " ".join(m for _, m in probs)
    assert "'city' is a required property" in msgs
    assert "town" in msgs


def test_reference_counts_as_present_but_must_name_an_earlier_label(weather_tool):
    tool = dict(
        weather_tool,
        parameters={
            "type": "object",
            "properties": {"city": {"type": "number"}},
            "required": ["city"],
        },
    )
    ok = [
        [{"name": "get_weather", "arguments": {"city": 1}, "label": "var1"}],
        [{"name": "get_weather", "arguments": {"city": "$var1.name$"}}],
    ]
    assert gold_problems([tool], ok) == []
    same_step = [
        [
            {"name": "get_weather", "arguments": {"city": 1}, "label": "var1"},
            {"name": "get_weather", "arguments": {"city": "$var1.name$"}},
        ]
    ]
    assert gold_problems([tool], same_step)[0][0] == "gold[0][1].arguments.city"


CONTEXT = [
    {"role": "user", "content": "Weather in Lima?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Lima"}}],
    },
    {"role": "tool", "name": "get_weather", "content": '{"temp_c": 19}'},
    {"role": "assistant", "content": "19 °C in Lima."},
    {"role": "user", "content": "And in Quito?"},
]


def test_a_conversation_is_context_ending_with_the_user_turn_answered(make_record):
    r = TaskRecord.model_validate(make_record(messages=CONTEXT, answer="12 °C."))
    assert [m.role for m in r.messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert r.conversation_text() == "Weather in Lima?"
    assert r.user_text() == "Weather in Lima?\nAnd in Quito?"
    assert TaskRecord.model_validate_json(r.model_dump_json()) == r


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (CONTEXT[:4], "must end with the user turn"),
        ([CONTEXT[0], CONTEXT[2], CONTEXT[4]], "a tool turn must follow"),
        ([{"role": "user", "content": "x", "tool_calls": []}], "tool_calls on a user turn"),
        ([{"role": "user", "content": "x", "name": "f"}], "name on a user turn"),
    ],
)
def test_context_turns_out_of_place_are_refused(make_record, messages, message):
    with pytest.raises(ValidationError, match=message):
        TaskRecord.model_validate(make_record(messages=messages))


def test_records_without_the_new_fields_store_and_hash_as_before(make_record):
    r = TaskRecord.model_validate(make_record())
    row = io.record_to_row(r)
    # no key of a field added for imports: data prepared before them keeps its hashes
    assert '"tool_calls"' not in row["messages"] and '"name"' not in row["messages"]
    assert "arguments_known" not in row["gold"] and row["answer"] is None
    legacy = {k: v for k, v in row.items() if k != "answer"}
    expected = hashlib.sha256((canonical_json(legacy) + "\n").encode()).hexdigest()
    assert io.content_hash([r]) == expected
    unknown = make_record(gold=[[{"name": "get_weather", "arguments_known": False}]])
    assert '"arguments_known":false' in io.record_to_row(TaskRecord.model_validate(unknown))["gold"]


def test_a_gold_call_without_known_arguments_is_not_checked_against_its_schema(weather_tool):
    unknown = [[{"name": "get_weather", "arguments": {}, "arguments_known": False}]]
    assert gold_problems([weather_tool], unknown) == []
    known = [[{"name": "get_weather", "arguments": {}}]]
    assert gold_problems([weather_tool], known)  # city is required
