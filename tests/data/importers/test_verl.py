"""The verl importer (the authors' RL parquet) on hand-written parquet fixtures
(``tests/fixtures/imports/verl/make_fixture.py`` writes them): ``rl.parquet`` in the
released shape (gold a flat list of tool names), ``rl_v2.parquet`` in the v2
converter's (JSON text, steps of ``{name, arguments}``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slca.data import io
from slca.data.importers import import_path, import_to_dir, openai, toucan, verl
from slca.data.importers.conversation import RowReject, conversation_tasks
from slca.data.importers.rows import read_rows

FIXTURES = Path(__file__).parents[2] / "fixtures" / "imports"
RELEASED = FIXTURES / "verl" / "rl.parquet"
V2 = FIXTURES / "verl" / "rl_v2.parquet"

RELEASED_REJECTS = {
    6: "unknown_tool",
    7: "duplicate_tools",
    8: "bad_tool",
    9: "no_tools",
    10: "no_user_turn",
    11: "bad_message",
    12: "unknown_format",
    13: "bad_json",
    14: "bad_arguments",
}
V2_REJECTS = {
    4: "schema_mismatch",
    5: "bad_arguments",
    6: "unknown_tool",
    7: "unknown_format",
    8: "bad_json",
}
# no_answer cannot happen: a verl row's gold is given apart from its turns
VERL_REASONS = {
    "bad_json",
    "bad_arguments",
    "unknown_tool",
    "schema_mismatch",
    "duplicate_tools",
    "bad_tool",
    "no_tools",
    "no_user_turn",
    "bad_message",
    "unknown_format",
}

W, T, A = "weather-get_weather", "clock-get_time", "calc-add"
RELEASED_GOLD = {
    "rl-1-0": [[(W, {}, False)]],
    "rl-2-0": [[(W, {}, False), (T, {}, False)]],  # a flat list: one parallel step
    "rl-3-1": [[(W, {}, False)]],
    "rl-4-0": [],
    "rl-5-0": [[(A, {}, False)]],
}
V2_GOLD = {
    "v2-1-0": [
        [(W, {"city": "Paris"}, True), (T, {"timezone": "Europe/Paris"}, True)],
        [(A, {"a": 1, "b": 2}, True)],
    ],
    "v2-2-0": [[(T, {}, False), (W, {"city": "Oslo"}, True)]],
    "v2-3-0": [],
}


def _gold(record):
    return [[(c.name, c.arguments, c.arguments_known) for c in step] for step in record.gold]


def _counts(result):
    return (
        result.rows,
        result.imported,
        result.rejected,
        result.tasks,
        result.no_call_tasks,
        result.context_tasks,
    )


@pytest.fixture(scope="module")
def released():
    return import_path(RELEASED, "verl", "rl")


@pytest.fixture(scope="module")
def v2():
    return import_path(V2, "verl", "v2")


def test_released_rows_are_imported_or_rejected_with_their_reason(released):
    records, rejects, result = released
    assert _counts(result) == (14, 5, 9, 5, 1, 1)
    assert result.imported + result.rejected == result.rows
    assert result.rejected_by_reason == {reason: 1 for reason in RELEASED_REJECTS.values()}
    assert {line["row"]: line["reason"] for line in rejects} == RELEASED_REJECTS
    for line in rejects:
        assert line["field"] and line["message"] and "record" in line


def test_v2_rows_are_imported_or_rejected_with_their_reason(v2):
    records, rejects, result = v2
    assert _counts(result) == (8, 3, 5, 3, 1, 0)
    assert result.imported + result.rejected == result.rows
    assert result.rejected_by_reason == {reason: 1 for reason in V2_REJECTS.values()}
    assert {line["row"]: line["reason"] for line in rejects} == V2_REJECTS
    # between them the fixtures hold a row for every reason a verl row can have
    assert set(RELEASED_REJECTS.values()) | set(V2_REJECTS.values()) == VERL_REASONS


def test_gold_calls_equal_the_hand_written_expectation(released, v2):
    assert {r.id: _gold(r) for r in released[0]} == RELEASED_GOLD
    assert {r.id: _gold(r) for r in v2[0]} == V2_GOLD


def test_the_tools_system_turn_is_dropped_and_others_kept(released):
    by_id = {r.id: r for r in released[0]}
    assert [m.model_dump(exclude_none=True) for m in by_id["rl-1-0"].messages] == [
        {"role": "user", "content": "How warm is it in Paris?"}
    ]
    assert [m.role for m in by_id["rl-5-0"].messages] == ["system", "user"]
    assert by_id["rl-5-0"].messages[0].content == "You are terse."
    assert [t.name for t in by_id["rl-5-0"].tools] == [A]  # from tool_schemas
    assert [t.name for t in by_id["rl-1-0"].tools] == [W, T, A]
    assert by_id["rl-1-0"].domain == "tool_call" and by_id["rl-4-0"].domain == "irrelevant"


def test_a_later_turn_keeps_calls_and_results_as_context(released):
    task = {r.id: r for r in released[0]}["rl-3-1"]  # original_turn_index 1
    assert [m.model_dump(exclude_none=True) for m in task.messages] == [
        {"role": "user", "content": "Weather and time in Paris?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {"name": W, "arguments": {"city": "Paris"}},
                {"name": T, "arguments": {"timezone": "Europe/Paris"}},
            ],
        },
        {"role": "tool", "content": "Paris: 18 C", "name": W},
        {"role": "tool", "content": "14:05", "name": T},
        {"role": "assistant", "content": "It is 18 C and 14:05 in Paris."},
        {"role": "user", "content": "And the weather in Rome?"},
    ]


def test_no_call_tasks(released, v2):
    for records, task_id in ((released[0], "rl-4-0"), (v2[0], "v2-3-0")):
        task = {r.id: r for r in records}[task_id]
        assert task.gold == [] and task.tools and task.answer is None


@pytest.mark.parametrize(("path", "unsniffed"), [(RELEASED, 1), (V2, 0)])
def test_auto_detects_verl_not_openai_or_toucan(path, unsniffed):
    _, _, result = import_path(path, "auto", "x")
    assert result.format == "verl"
    rows = [r.data for r in read_rows(path)]
    assert not any(openai.sniff(r) or toucan.sniff(r) for r in rows)
    # every row but the one with a null reward_model
    assert sum(verl.sniff(r) for r in rows) == len(rows) - unsniffed


def test_verl_sniff_claims_no_other_format():
    for name in ("toucan", "openai"):
        for path in (FIXTURES / name).glob("*.jsonl"):
            for row in read_rows(path):
                assert not verl.sniff(row.data), (path, row.number)
    maths = {
        "prompt": [{"role": "user", "content": "1+1?"}],
        "reward_model": {"ground_truth": "2", "style": "rule"},
    }
    assert not verl.sniff(maths)


def test_import_to_dir_writes_tasks_report_and_rejects(tmp_path):
    out = tmp_path / "out"
    result = import_to_dir(RELEASED, "auto", out, source="mine")
    report = json.loads((out / "report.json").read_text())
    assert (report["format"], report["rows"], report["imported"], report["rejected"]) == (
        "verl",
        14,
        5,
        9,
    )
    assert result.tasks == 5
    records = io.read_records(out / "tasks.parquet")
    assert {r.id: _gold(r) for r in records} == {
        k.replace("rl-", "mine-"): v for k, v in RELEASED_GOLD.items()
    }
    lines = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert {x["row"]: x["reason"] for x in lines} == RELEASED_REJECTS


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def _row(prompt, gold, **gt):
    return {
        "prompt": json.dumps(prompt),
        "tools": json.dumps(TOOLS),
        "reward_model": json.dumps({"ground_truth": {"gold_tool_calls": gold, **gt}}),
        "extra_info": {"original_turn_index": 2},
    }


def _task(row):
    (task,) = conversation_tasks(verl.conversation(row), "s", "9")
    return task


def test_json_text_fields_nested_names_and_the_turn_index():
    row = _row(
        [{"role": "user", "content": "Weather in Oslo, then Bergen?"}],
        [["get_weather"], ["get_weather"]],
    )
    assert verl.sniff(row)
    task = _task(row)
    assert task.id == "s-9-2"
    assert _gold(task) == [[("get_weather", {}, False)], [("get_weather", {}, False)]]


def test_a_tool_role_turn_and_reasoning_in_a_context_turn():
    row = _row(
        [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": "<think>Look it up.</think>\n<tool_call>\n"
                '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
            },
            {"role": "tool", "content": "3 C"},
            {"role": "assistant", "content": "3 C."},
            {"role": "user", "content": "And Bergen?"},
        ],
        [{"name": "get_weather", "arguments": {"city": "Bergen"}}],
    )
    task = _task(row)
    assert task.messages[1].content == "<think>Look it up.</think>"
    assert task.messages[2].name == "get_weather" and task.messages[2].content == "3 C"
    assert _gold(task) == [[("get_weather", {"city": "Bergen"}, True)]]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>', "bad_json"),
        ('<tool_call>\n{"name": "get_weather", "arguments": 3}\n</tool_call>', "bad_arguments"),
        ('<tool_call>\n{"name": "get_weather"', "bad_message"),
        ('<tool_call>\n{"name": "get_stock", "arguments": {}}\n</tool_call>', "unknown_tool"),
    ],
)
def test_bad_context_calls(content, reason):
    row = _row(
        [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": "<tool_response>\n?\n</tool_response>"},
            {"role": "user", "content": "Well?"},
        ],
        ["get_weather"],
    )
    with pytest.raises(RowReject) as e:
        _task(row)
    assert e.value.reason == reason


def test_tool_response_turns():
    assert verl.tool_responses(
        "<tool_response>\na\n</tool_response>\n<tool_response>b</tool_response>"
    ) == ["a", "b"]
    assert verl.tool_responses("see <tool_response>a</tool_response>") is None
    assert verl.tool_responses("<tool_response>a") is None
    assert verl.tool_responses("  ") is None


def test_a_prompt_ending_with_a_tool_response_is_rejected():
    row = _row(
        [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": '<tool_call>\n{"name": "get_weather", '
                '"arguments": {"city": "Oslo"}}\n</tool_call>',
            },
            {"role": "user", "content": "<tool_response>\n3 C\n</tool_response>"},
        ],
        ["get_weather"],
    )
    with pytest.raises(RowReject) as e:
        _task(row)
    assert e.value.reason == "bad_message"
