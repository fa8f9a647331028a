import json

import pytest
from pydantic import ValidationError

from slca.data import record as rec_mod
from slca.data.checks import gold_problems, is_reference, record_problems, schema_problems
from slca.data.record import TaskRecord


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
