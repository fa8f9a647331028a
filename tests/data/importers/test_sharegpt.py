"""The ShareGPT importer (Hermes, LLaMA-Factory and Glaive variants): the fixture's
report, gold call for call, contexts, tool names, and that nothing is ever evaluated."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

from slca.data.importers import FORMATS, import_path, import_to_dir, sharegpt, xlam
from slca.data.importers import openai as openai_format
from slca.data.importers.conversation import RowReject, conversation_tasks

FIXTURE = Path(__file__).parents[2] / "fixtures" / "imports" / "sharegpt" / "hermes.jsonl"

REPORT = {
    "rows": 21,
    "imported": 9,
    "rejected": 12,
    "tasks": 10,
    "no_call_tasks": 1,
    "context_tasks": 1,
    "rejected_by_reason": {
        "bad_arguments": 1,
        "bad_json": 2,
        "bad_message": 1,
        "bad_tool": 1,
        "duplicate_tools": 1,
        "no_answer": 1,
        "no_tools": 1,
        "no_user_turn": 1,
        "schema_mismatch": 1,
        "unknown_format": 1,
        "unknown_tool": 1,
    },
}

REJECTS = {
    10: ("bad_json", "conversations[0].value<tools>"),  # single-quoted tool dicts
    11: ("bad_json", "conversations[2].functioncall"),  # a Glaive call that is no literal
    12: ("bad_arguments", "conversations[2].tool_call[0].arguments"),
    13: ("unknown_tool", "conversations[2].tool_call[0].name"),
    14: ("schema_mismatch", "conversations[2].tool_call[0].arguments"),
    15: ("duplicate_tools", "conversations[0].value<tools>[1].name"),
    16: ("bad_tool", "conversations[0].value<tools>[0]"),
    17: ("no_tools", "tools"),
    18: ("no_user_turn", "messages"),
    19: ("no_answer", "messages"),
    20: ("bad_message", "conversations[2].value"),
    21: ("unknown_format", "<row>"),
}

# task id -> (gold, reference answer)
TASKS = {
    "h-1-0": ([[("get_weather", {"city": "Paris"})]], None),
    "h-2-0": (
        [
            [
                ("get_weather", {"city": "Paris", "unit": "f"}),
                ("get_weather", {"city": "Rome", "unit": "f"}),
            ]
        ],
        "Paris is 64 °F and Rome is 75 °F.",
    ),
    "h-3-0": (
        [
            [("search_flights", {"origin": "SFO", "destination": "JFK", "date": "2024-05-01"})],
            [("book_flight", {"flight_id": "UA1"})],
        ],
        "Booked UA1 from SFO to JFK on 2024-05-01.",
    ),
    "h-4-0": ([[("get_weather", {"city": "Oslo"})]], "It is 3 °C in Oslo."),
    "h-4-1": ([[("get_weather", {"city": "Bergen", "unit": "f"})]], "It is 41 °F in Bergen."),
    "h-5-0": ([], "You're welcome!"),
    "h-6-0": ([[("book_flight", {"flight_id": "AF7"})]], "AF7 is booked."),
    "h-7-0": (
        [[("get_weather", {"city": "Lima"}), ("get_weather", {"city": "Quito"})]],
        "Lima 19 °C, Quito 14 °C.",
    ),
    "h-8-0": ([[("book_flight", {"flight_id": "BA9"})]], "Flight BA9 is booked."),
    "h-9-0": ([[("get_weather", {"city": "Dublin"})]], None),
}


def _gold(task):
    return [[(c.name, c.arguments) for c in step] for step in task.gold]


@pytest.fixture(scope="module")
def imported():
    records, rejects, result = import_path(FIXTURE, "sharegpt", "h")
    return {t.id: t for t in records}, rejects, result


@pytest.mark.parametrize("fmt", ["sharegpt", "auto"])
def test_report(fmt):
    records, rejects, result = import_path(FIXTURE, fmt, "h")
    assert result.format == "sharegpt"
    report = result.report()
    assert {k: report[k] for k in REPORT} == REPORT
    assert result.imported + result.rejected == result.rows
    assert {r["row"]: (r["reason"], r["field"]) for r in rejects} == REJECTS
    assert len(records) == result.tasks


def test_gold_and_answers(imported):
    tasks, _, _ = imported
    assert {i: (_gold(t), t.answer) for i, t in tasks.items()} == TASKS


def test_tools_and_domains(imported):
    tasks, _, _ = imported
    names = {i: [tool.name for tool in t.tools] for i, t in tasks.items()}
    assert names["h-1-0"] == ["get_weather", "search_flights", "book_flight"]
    assert names["h-6-0"] == ["get_weather", "book_flight"]  # one object per line
    assert names["h-7-0"] == ["get_weather"]  # the tools column
    assert names["h-8-0"] == ["search_flights", "book_flight"]  # Glaive's listing
    assert tasks["h-1-0"].tools[0].parameters["required"] == ["city"]
    assert tasks["h-1-0"].domain == "Weather" and tasks["h-2-0"].domain == "sharegpt"


def test_prompts(imported):
    tasks, _, _ = imported
    # the system turn holding the tools is dropped; a plain system prompt stays
    for i, t in tasks.items():
        roles = [m.role for m in t.messages]
        if i == "h-7-0":
            assert roles == ["system", "user"]
            assert t.messages[0].content == "You are a terse travel assistant."
        elif i != "h-4-1":
            assert roles == ["user"], i
    context = tasks["h-4-1"].messages
    assert [m.role for m in context] == ["user", "assistant", "tool", "assistant", "user"]
    assert [(c.name, c.arguments) for c in context[1].tool_calls] == [
        ("get_weather", {"city": "Oslo"})
    ]
    assert context[2].name == "get_weather"
    assert json.loads(context[2].content) == {"name": "get_weather", "content": {"temp": 3}}
    assert context[3].content == "It is 3 °C in Oslo."
    assert context[4].content == "And in Bergen, in Fahrenheit?"


def test_import_to_dir(tmp_path):
    out = tmp_path / "out"
    result = import_to_dir(FIXTURE, "auto", out, source="hermes")
    report = json.loads((out / "report.json").read_text())
    assert {k: report[k] for k in REPORT} == REPORT and result.format == "sharegpt"
    lines = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert {r["row"]: r["reason"] for r in lines} == {k: v[0] for k, v in REJECTS.items()}


def _turns(conv):
    return [
        (t.role, t.content, t.name, [(c.name, c.arguments) for c in t.calls]) for t in conv.turns
    ]


@pytest.fixture
def no_code_runs(monkeypatch):
    """eval and exec fail the test: the literal parser must read data, never run it."""

    def refuse(*args, **kwargs):
        raise AssertionError("evaluated")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)


TOOL = {"name": "f", "description": "", "parameters": {"type": "object", "properties": {}}}
SYSTEM = {"from": "system", "value": f"<tools> {json.dumps([TOOL])} </tools>"}


def test_results_named_from_calls_in_order():
    row = {
        "conversations": [
            SYSTEM,
            {"from": "human", "value": "go"},
            {
                "from": "gpt",
                "value": 'Two calls. <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
                '<tool_call>{"name": "g", "arguments": "{\\"b\\": 2}"}</tool_call>',
            },
            {"from": "tool", "value": "<tool_response>first</tool_response>"},
            {"from": "tool", "value": '<tool_response>{"name": "h", "x": 1}</tool_response>'},
            {"from": "gpt", "value": "done"},
        ]
    }
    conv = sharegpt.conversation(row)
    assert _turns(conv) == [
        ("user", "go", None, []),
        ("assistant", "Two calls.", None, [("f", {"a": 1}), ("g", '{"b": 2}')]),
        ("tool", "first", "f", []),
        ("tool", '{"name": "h", "x": 1}', "h", []),
        ("assistant", "done", None, []),
    ]


def test_tools_column_wins_and_system_dropped_unparsed():
    row = {
        "conversations": [
            {"from": "system", "value": "<tools> [{'name': 'x'}] </tools>"},  # never parsed
            {"from": "user", "value": "go"},
            {"from": "assistant", "value": '<tool_call>{"name": "f", "arguments": {}}</tool_call>'},
        ],
        "tools": json.dumps([TOOL]),
    }
    conv = sharegpt.conversation(row)
    assert conv.tools == [TOOL] and [t.role for t in conv.turns] == ["user", "assistant"]
    (task,) = conversation_tasks(conv, "s", "1")
    assert _gold(task) == [[("f", {})]]


def test_hermes_python_repr_tools_and_calls_are_read_nothing_evaluated(no_code_runs):
    """hermes-function-calling-v1 writes its <tools> and <tool_call> blocks as Python
    reprs; they are parsed as literals, and a block holding anything else (a call) is
    bad_json, never run."""

    row = {
        "conversations": [
            {"from": "system", "value": "<tools>\n" + str([TOOL]) + "\n</tools>"},
            {"from": "human", "value": "go"},
            {
                "from": "gpt",
                "value": "<tool_call>\n{'arguments': {'x': True, 'y': None}, 'name': 'f'}\n"
                "</tool_call>",
            },
        ]
    }
    conversation = sharegpt.conversation(row)
    (call,) = conversation.turns[-1].calls
    assert (call.name, call.arguments) == ("f", {"x": True, "y": None})
    assert conversation.tools == [TOOL]
    row["conversations"][2]["value"] = (
        "<tool_call>\n{'arguments': __import__('os').getcwd(), 'name': 'f'}\n</tool_call>"
    )
    with pytest.raises(RowReject) as e:
        sharegpt.conversation(row)
    assert e.value.reason == "bad_json" and e.value.field == "conversations[2].tool_call[0]"
    assert "neither JSON nor a Python literal" in e.value.message


@pytest.mark.parametrize(
    ("block", "values"),
    [
        ('[{"name": "a"}, {"name": "b"}]', [[{"name": "a"}, {"name": "b"}]]),
        ('{"name": "a"}', [{"name": "a"}]),
        ('{"name": "a"}\n{"name": "b"}\n', [{"name": "a"}, {"name": "b"}]),
        ('{"name": "a"}{"name": "b"}', [{"name": "a"}, {"name": "b"}]),
        ('{"name": "a"},\n{"name": "b"}', [{"name": "a"}, {"name": "b"}]),
        ("[{'name': 'a', 'ok': True}]", [[{"name": "a", "ok": True}]]),  # Hermes's repr
    ],
)
def test_json_values(block, values):
    assert sharegpt.json_values(block, "w") == values


@pytest.mark.parametrize("block", ["{'name': a}", '{"name": "a"} trailing', "{"])
def test_json_values_bad(block):
    with pytest.raises(RowReject) as e:
        sharegpt.json_values(block, "w")
    assert e.value.reason == "bad_json" and e.value.field == "w"


def test_empty_tools_tag_is_not_a_tool_list():
    # Hermes's prompt says "within <tools> </tools> XML tags" before the real block
    tools = sharegpt._system_tools(
        f"signatures within <tools> </tools> tags. <tools> {json.dumps(TOOL)} </tools>", "w"
    )
    assert tools == [TOOL]
    assert sharegpt._system_tools("within <tools> </tools> tags", "w") == []
    assert sharegpt._system_tools("You are helpful.", "w") is None


def test_glaive_without_functions_is_no_tools():
    row = {
        "conversations": [
            {
                "from": "system",
                "value": "SYSTEM: You are a helpful assistant, with no access "
                "to external functions.",
            },
            {"from": "human", "value": "hi"},
            {"from": "gpt", "value": "hello <|endoftext|>"},
        ]
    }
    conv = sharegpt.conversation(row)
    assert conv.tools == [] and [t.role for t in conv.turns] == ["system", "user", "assistant"]
    with pytest.raises(RowReject) as e:
        conversation_tasks(conv, "s", "1")
    assert e.value.reason == "no_tools"


SHAREGPT_ROW = {
    "conversations": [SYSTEM, {"from": "human", "value": "go"}, {"from": "gpt", "value": "ok"}]
}
OPENAI_ROW = {
    "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}],
    "tools": [{"type": "function", "function": TOOL}],
}
XLAM_ROW = {"id": 1, "query": "go", "tools": json.dumps([TOOL]), "answers": "[]"}


def test_sniff():
    assert sharegpt.sniff(SHAREGPT_ROW)
    assert sharegpt.sniff({"conversations": json.dumps(SHAREGPT_ROW["conversations"])})
    assert sharegpt.sniff({"messages": SHAREGPT_ROW["conversations"]})  # from/value turns
    assert not sharegpt.sniff(OPENAI_ROW)
    assert not sharegpt.sniff({"messages": OPENAI_ROW["messages"]})
    assert not sharegpt.sniff(XLAM_ROW)
    assert not sharegpt.sniff({"conversations": "not json"})
    assert not sharegpt.sniff({"conversations": []})
    assert not openai_format.sniff(SHAREGPT_ROW)
    assert not xlam.sniff(SHAREGPT_ROW)
    claim = {name for name, m in FORMATS.items() if m.sniff(SHAREGPT_ROW)}
    assert "sharegpt" in claim and not claim & {"openai", "xlam"}
    assert not {name for name, m in FORMATS.items() if m.sniff(OPENAI_ROW)} & {"sharegpt", "xlam"}


GLAIVE_SYSTEM = (
    "SYSTEM: You are a helpful assistant with access to the following functions. "
    "Use them if required -\n"
    + json.dumps(
        {
            "name": "get_weather",
            "description": "Current weather of a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
        indent=4,
    )
)

# Glaive v2's real shape: the arguments a single-quoted Python string holding JSON
GLAIVE_V2_CALL = """<functioncall> {"name": "get_weather", "arguments": '{"city": "Oslo"}'}"""


def test_a_glaive_v2_call_with_single_quoted_arguments_is_read_nothing_evaluated(no_code_runs):
    row = {
        "conversations": [
            {"from": "system", "value": GLAIVE_SYSTEM},
            {"from": "human", "value": "What's the weather in Oslo?"},
            {
                "from": "gpt",
                "value": GLAIVE_V2_CALL + " <|endoftext|>",
            },
            {"from": "function_response", "value": '{"temp_c": 4}'},
            {"from": "gpt", "value": "It is 4 °C in Oslo. <|endoftext|>"},
            {"from": "human", "value": "Thanks!"},
            {"from": "gpt", "value": "You're welcome. <|endoftext|>"},
        ]
    }
    first, second = conversation_tasks(sharegpt.conversation(row), "s", "1")
    assert _gold(first) == [[("get_weather", {"city": "Oslo"})]]
    assert first.answer == "It is 4 °C in Oslo."
    call = second.messages[1]
    assert (call.content, [(c.name, c.arguments) for c in call.tool_calls]) == (
        "",
        [("get_weather", {"city": "Oslo"})],
    )
    assert (second.messages[2].name, second.messages[2].content) == ("get_weather", '{"temp_c": 4}')


@pytest.mark.parametrize(
    "call",
    [
        """{"name": "get_weather", "arguments": __import__('os').getcwd()}""",
        """{"name": "get_weather", "arguments": '{"city": "Oslo"}'""",  # unclosed
    ],
)
def test_a_glaive_call_that_is_no_literal_is_bad_json(call):
    row = {
        "conversations": [
            {"from": "system", "value": GLAIVE_SYSTEM},
            {"from": "human", "value": "Weather in Oslo?"},
            {"from": "gpt", "value": f"<functioncall> {call} <|endoftext|>"},
        ]
    }
    with pytest.raises(RowReject) as e:
        sharegpt.conversation(row)
    assert (e.value.reason, e.value.field) == ("bad_json", "conversations[2].functioncall")
