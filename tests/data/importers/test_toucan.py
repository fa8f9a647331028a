"""The toucan importer (Toucan-1.5M rows) on a hand-written fixture
(``tests/fixtures/imports/toucan/make_fixture.py`` writes it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slca.data import io
from slca.data.importers import REASONS, import_path, import_to_dir, openai, toucan, verl
from slca.data.importers.conversation import (
    MAX_LITERAL_CHARS,
    RowReject,
    conversation_tasks,
    literal,
)
from slca.data.importers.rows import read_rows

FIXTURES = Path(__file__).parents[2] / "fixtures" / "imports"
FIXTURE = FIXTURES / "toucan" / "toucan.jsonl"

EXPECTED_REJECTS = {
    6: "bad_json",
    7: "bad_json",
    8: "bad_arguments",
    9: "unknown_tool",
    10: "schema_mismatch",
    11: "duplicate_tools",
    12: "bad_tool",
    13: "no_tools",
    14: "no_user_turn",
    15: "no_answer",
    16: "bad_message",
    17: "unknown_format",
}

W, T = "weather-get_weather", "clock-get_time"
EXPECTED_GOLD = {
    "tc-1-0": [[(W, {"city": "Paris"}, True)]],
    "tc-2-0": [[(W, {"city": "Boston"}, True), (W, {"city": "Chicago", "unit": "f"}, True)]],
    "tc-3-0": [[("calc-add", {"a": 70, "b": 72}, True)], [("calc-div", {"a": 142, "b": 2}, True)]],
    "tc-4-0": [[(T, {"timezone": "Asia/Tokyo"}, True)]],
    "tc-4-1": [[(W, {"city": "Tokyo"}, True)]],
    "tc-4-2": [],
    "tc-5-0": [],
}


@pytest.fixture(scope="module")
def imported():
    return import_path(FIXTURE, "toucan", "tc")


def _gold(record):
    return [[(c.name, c.arguments, c.arguments_known) for c in step] for step in record.gold]


def test_every_row_is_imported_or_rejected_with_its_reason(imported):
    records, rejects, result = imported
    assert (result.rows, result.imported, result.rejected, result.tasks) == (17, 5, 12, 7)
    assert (result.no_call_tasks, result.context_tasks) == (2, 2)
    assert result.imported + result.rejected == result.rows
    assert result.rejected_by_reason == {
        "bad_json": 2,
        "bad_arguments": 1,
        "unknown_tool": 1,
        "schema_mismatch": 1,
        "duplicate_tools": 1,
        "bad_tool": 1,
        "no_tools": 1,
        "no_user_turn": 1,
        "no_answer": 1,
        "bad_message": 1,
        "unknown_format": 1,
    }
    # every reason can happen here; the size limits' are tests/data/test_limits.py's
    assert set(EXPECTED_REJECTS.values()) == set(REASONS) - {"over_limit"}
    assert {line["row"]: line["reason"] for line in rejects} == EXPECTED_REJECTS
    for line in rejects:
        assert line["field"] and line["message"] and "record" in line


def test_gold_calls_equal_the_hand_written_expectation(imported):
    records, _, _ = imported
    assert {r.id: _gold(r) for r in records} == EXPECTED_GOLD
    by_id = {r.id: r for r in records}
    assert by_id["tc-1-0"].domain == "single-turn-original"
    assert by_id["tc-4-1"].domain == "multi-turn"
    assert by_id["tc-3-0"].answer == "The mean is 71."
    # the preamble is the calling turn's text, not the answer
    assert by_id["tc-1-0"].answer == "It is 18 C and cloudy in Paris."


def test_a_later_user_turn_keeps_the_earlier_ones_as_context(imported):
    records, _, _ = imported
    follow_up = {r.id: r for r in records}["tc-4-1"]
    assert [m.model_dump(exclude_none=True) for m in follow_up.messages] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What time is it in Tokyo?"},
        {
            "role": "assistant",
            "content": "Checking the clock.",
            "tool_calls": [{"name": T, "arguments": {"timezone": "Asia/Tokyo"}}],
        },
        {"role": "tool", "content": "21:04", "name": T},
        {"role": "assistant", "content": "It is 21:04 in Tokyo."},
        {"role": "user", "content": "And the weather there?"},
    ]


def test_no_call_tasks(imported):
    records, _, _ = imported
    by_id = {r.id: r for r in records}
    assert by_id["tc-5-0"].gold == [] and by_id["tc-5-0"].domain == "irrelevant"
    thanks = by_id["tc-4-2"]
    assert thanks.gold == [] and thanks.answer == "You're welcome."
    assert thanks.messages[-1].content == "Thanks!"
    assert [m.role for m in thanks.messages].count("tool") == 2


def test_auto_detects_toucan_not_openai():
    _, _, result = import_path(FIXTURE, "auto", "tc")
    assert result.format == "toucan"
    rows = [r.data for r in read_rows(FIXTURE) if r.error is None and isinstance(r.data, dict)]
    good = rows[:5]
    assert all(toucan.sniff(r) for r in good)
    assert not any(verl.sniff(r) for r in rows)


def test_import_to_dir_writes_tasks_report_and_rejects(tmp_path):
    out = tmp_path / "out"
    result = import_to_dir(FIXTURE, "auto", out)
    assert result.source == "toucan"  # the file's stem
    report = json.loads((out / "report.json").read_text())
    assert (report["rows"], report["imported"], report["rejected"], report["tasks"]) == (
        17,
        5,
        12,
        7,
    )
    assert report["format"] == "toucan"
    assert len(io.read_records(out / "tasks.parquet")) == 7
    lines = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert {x["row"]: x["reason"] for x in lines} == EXPECTED_REJECTS


def test_sniff_claims_no_openai_row():
    openai_row = {
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "3 C"},
            {"role": "assistant", "content": "3 C."},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
    }
    assert openai.sniff(openai_row) and not toucan.sniff(openai_row)
    as_text = {**openai_row, "messages": json.dumps(openai_row["messages"])}
    assert openai.sniff(as_text) and not toucan.sniff(as_text)
    for path in (FIXTURES / "openai").glob("*.jsonl"):
        for row in read_rows(path):
            assert not toucan.sniff(row.data), (path, row.number)


def _row(*messages, tools=None):
    tools = tools or [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    return {"target_tools": "", "tools": json.dumps(tools), "messages": json.dumps(list(messages))}


def test_the_literal_parser_never_runs_code(tmp_path):
    marker = tmp_path / "pwned"
    for code in (
        f"__import__('os').system('touch {marker}')",
        f"open('{marker}', 'w')",
        "(lambda: 1)()",
        "{'name': 'get_weather', 'arguments': __import__('os').getcwd()}",
    ):
        with pytest.raises(RowReject) as e:
            literal(code, "x")
        assert e.value.reason == "bad_arguments"
    assert not marker.exists()


@pytest.mark.parametrize(
    "text",
    [
        "{'name': '" + "a" * (MAX_LITERAL_CHARS + 1) + "'}",  # too long
        "[" * 5000 + "]" * 5000,  # too deep for the parser
        "{'name': 'f', 'arguments': {1, 2}}",  # a set: not JSON data
        "{'name': 'f', 'arguments': b'x'}",
        "{'name': 'f', 'arguments': 1j}",
        "{'name': 'f', 'arguments': float('nan')}",
        "{'name': 'f',",
    ],
)
def test_the_literal_parser_refuses_what_is_not_plain_data(text):
    with pytest.raises(RowReject) as e:
        literal(text, "x")
    assert e.value.reason == "bad_arguments"


def test_the_literal_parser_reads_python_and_json_calls():
    py = "{'name': 'get_weather', 'arguments': '{\"city\": \"Paris\"}', 'ok': True, 'n': None}"
    assert literal(py, "x") == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "ok": True,
        "n": None,
    }
    assert literal('{"name": "f", "arguments": {}}', "x") == {"name": "f", "arguments": {}}


def _tasks(row):
    return conversation_tasks(toucan.conversation(row), "s", "1")


def test_arguments_that_are_not_an_object_are_rejected():
    row = _row(
        {"role": "user", "content": "Weather?"},
        {"role": "tool_call", "content": "{'name': 'get_weather', 'arguments': '[\"Paris\"]'}"},
        {"role": "assistant", "content": "?"},
    )
    with pytest.raises(RowReject) as e:
        _tasks(row)
    assert e.value.reason == "bad_arguments"
    deep = _row(
        {"role": "user", "content": "Weather?"},
        {
            "role": "tool_call",
            "content": repr({"name": "get_weather", "arguments": "[" * 20_000 + "]" * 20_000}),
        },
        {"role": "assistant", "content": "?"},
    )
    with pytest.raises(RowReject) as e:
        _tasks(deep)
    assert e.value.reason == "bad_arguments"


def test_tool_turns_are_named_by_their_call_or_their_content():
    row = _row(
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "tool_call",
            "content": "{'name': 'get_weather', 'arguments': '{\"city\": \"Oslo\"}'}",
        },
        {"role": "tool_response", "content": "3 C"},
        {"role": "tool_response", "content": '{"name": "get_weather", "content": "still 3 C"}'},
        {"role": "assistant", "content": "3 C."},
        {"role": "user", "content": "Thanks"},
        {"role": "assistant", "content": "Bye."},
    )
    (_, last) = _tasks(row)
    tools = [m for m in last.messages if m.role == "tool"]
    assert [t.name for t in tools] == ["get_weather", "get_weather"]
    assert last.messages[1].tool_calls[0].arguments == {"city": "Oslo"}


def test_a_tool_call_without_preamble_after_a_response_is_a_new_step():
    row = _row(
        {"role": "user", "content": "Weather in Oslo, then Bergen?"},
        {
            "role": "tool_call",
            "content": "{'name': 'get_weather', 'arguments': '{\"city\": \"Oslo\"}'}",
        },
        {"role": "tool_response", "content": "3 C"},
        {
            "role": "tool_call",
            "content": "{'name': 'get_weather', 'arguments': '{\"city\": \"Bergen\"}'}",
        },
        {"role": "tool_response", "content": "5 C"},
        {"role": "assistant", "content": "3 C and 5 C."},
    )
    (task,) = _tasks(row)
    assert _gold(task) == [
        [("get_weather", {"city": "Oslo"}, True)],
        [("get_weather", {"city": "Bergen"}, True)],
    ]
    assert task.domain == "toucan"  # no subset_name
