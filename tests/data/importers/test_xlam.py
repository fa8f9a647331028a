"""The xLAM (APIGen) importer: fixtures in every container, the type mapping, sniffing.

The container fixtures (``xlam.parquet``, the ``xlam_dataset`` directory that
``datasets.Dataset.save_to_disk`` would write: ``state.json`` plus an Arrow IPC stream)
hold lines 1, 2, 3 and 13 of ``xlam.jsonl``, every column as the dataset stores it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slca.data.importers import FORMATS, import_path, import_to_dir, sharegpt, xlam
from slca.data.importers import openai as openai_format
from slca.data.importers.conversation import RowReject
from slca.data.importers.rows import read_rows

FIXTURES = Path(__file__).parents[2] / "fixtures" / "imports" / "xlam"
JSONL = FIXTURES / "xlam.jsonl"
PARQUET = FIXTURES / "xlam.parquet"
DATASET = FIXTURES / "xlam_dataset"

REPORT = {
    "rows": 19,
    "imported": 8,
    "rejected": 11,
    "tasks": 8,
    "no_call_tasks": 1,
    "context_tasks": 0,
    "rejected_by_reason": {
        "bad_arguments": 1,
        "bad_json": 2,
        "bad_message": 1,
        "bad_tool": 1,
        "duplicate_tools": 1,
        "no_tools": 1,
        "no_user_turn": 1,
        "schema_mismatch": 1,
        "unknown_format": 1,
        "unknown_tool": 1,
    },
}

REJECTS = {
    9: ("bad_json", "tools"),  # tools truncated
    10: ("bad_json", "<row>"),  # the line is not JSON
    11: ("bad_arguments", "answers[0].arguments"),
    12: ("unknown_tool", "answers[0].name"),
    13: ("schema_mismatch", "answers[0].arguments.n"),  # an int given "5.0"
    14: ("duplicate_tools", "tools[1].name"),
    15: ("bad_tool", "tools[0].parameters.n"),
    16: ("no_tools", "tools"),
    17: ("no_user_turn", "query"),
    18: ("bad_message", "answers"),
    19: ("unknown_format", "<row>"),
}

GOLD = {
    "x-1-0": [[("live_giveaways_by_type", {"type": "beta"})]],
    "x-2-0": [
        [
            ("live_giveaways_by_type", {"type": "beta"}),
            ("live_giveaways_by_type", {"type": "game"}),
            ("calculate_factorial", {"n": 5}),
        ]
    ],
    "x-3-0": [],
    "x-4-0": [[("find_n_largest_numbers", {"nums": [3, 9, 1, 7], "n": 2, "weights": [0.5, 1]})]],
    "x-5-0": [[("trapezoidal_integration", {"func": "x**2", "a": 0, "b": 1, "n": 100.0})]],
    "x-6-0": [[("euclidean_distance", {"point_a": [0, 0], "point_b": [3, 4]})]],
    "x-7-0": [[("get_weather", {"city": "Paris"})]],
    "x-8-0": [[("all_giveaways", {})]],
}


def _counts(result) -> dict:
    report = result.report()
    return {k: report[k] for k in REPORT}


def _gold(task) -> list[list[tuple[str, dict]]]:
    return [[(c.name, c.arguments) for c in step] for step in task.gold]


@pytest.mark.parametrize("fmt", ["xlam", "auto"])
def test_jsonl_report(fmt):
    records, rejects, result = import_path(JSONL, fmt, "x")
    assert result.format == "xlam"
    assert _counts(result) == REPORT
    assert result.imported + result.rejected == result.rows
    assert {r["row"]: (r["reason"], r["field"]) for r in rejects} == REJECTS
    assert len(records) == result.tasks


def test_gold_call_for_call():
    records, _, _ = import_path(JSONL, "xlam", "x")
    assert {t.id: _gold(t) for t in records} == GOLD
    for t in records:
        assert [m.role for m in t.messages] == ["user"]
        assert t.answer is None and t.source == "x"
        assert all(c.arguments_known for step in t.gold for c in step)
    by_id = {t.id: t for t in records}
    assert by_id["x-5-0"].domain == "math"  # the row's category
    assert by_id["x-1-0"].domain == "xlam"
    assert by_id["x-2-0"].messages[0].content.startswith("Live giveaways for beta")


def test_normalised_parameters():
    records, _, _ = import_path(JSONL, "xlam", "x")
    by_id = {t.id: t for t in records}
    (tool,) = by_id["x-4-0"].tools
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "nums": {
                "type": "array",
                "items": {"type": "integer"},
                "description": "The list of numbers.",
            },
            "n": {
                "type": "integer",
                "description": "The number of largest numbers to find.",
                "default": 1,
            },
            "weights": {
                "type": "array",
                "items": {"type": "number"},
                "description": "Weights of the numbers.",
            },
            "order": {"type": "string", "description": "asc or desc."},
            "options": {"type": "object", "description": "Extra options.", "default": {}},
        },
        "required": ["nums"],
    }
    (giveaway,) = by_id["x-1-0"].tools
    assert giveaway.parameters["required"] == []  # "type" has a default
    assert giveaway.parameters["properties"]["type"]["default"] == "game"
    (integrate,) = by_id["x-5-0"].tools
    assert "type" not in integrate.parameters["properties"]["func"]  # Callable: anything
    assert integrate.parameters["required"] == ["func", "a", "b"]
    (weather,) = by_id["x-7-0"].tools  # a JSON Schema already: kept
    assert weather.parameters == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    (empty,) = by_id["x-8-0"].tools
    assert empty.parameters == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("type_text", "schema", "optional"),
    [
        ("str", {"type": "string"}, False),
        ("int", {"type": "integer"}, False),
        ("float", {"type": "number"}, False),
        ("bool", {"type": "boolean"}, False),
        ("list", {"type": "array"}, False),
        ("List", {"type": "array"}, False),
        ("dict", {"type": "object"}, False),
        ("Dict[str, Any]", {"type": "object"}, False),
        ("List[int]", {"type": "array", "items": {"type": "integer"}}, False),
        ("List[str]", {"type": "array", "items": {"type": "string"}}, False),
        ("List[Any]", {"type": "array"}, False),
        ("typing.List[float]", {"type": "array", "items": {"type": "number"}}, False),
        (
            "List[List[int]]",
            {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
            False,
        ),
        ("List[Dict[str, Any]]", {"type": "array", "items": {"type": "object"}}, False),
        ("Tuple[int, int]", {"type": "array", "items": {"type": "integer"}}, False),
        ("Tuple[int, ...]", {"type": "array", "items": {"type": "integer"}}, False),
        ("Tuple[int, str]", {"type": "array"}, False),
        ("Set[str]", {"type": "array", "items": {"type": "string"}}, False),
        ("Optional[str]", {"type": "string"}, True),
        ("Optional[List[int]]", {"type": "array", "items": {"type": "integer"}}, True),
        ("str, optional", {"type": "string"}, True),
        ("float, optional", {"type": "number"}, True),
        ("List[int], optional", {"type": "array", "items": {"type": "integer"}}, True),
        ("Dict[str, int], optional", {"type": "object"}, True),
        ("int (optional)", {"type": "integer"}, True),
        ("int, default=10", {"type": "integer"}, True),
        ("Union[int, float]", {"type": ["integer", "number"]}, False),
        ("Union[str, None]", {"type": "string"}, True),
        (
            "Union[str, List[str]]",
            {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
            False,
        ),
        ("Union[int, Callable]", {}, False),
        ("Callable", {}, False),
        ("Callable[[float], float]", {}, False),
        ("Any", {}, False),
        ("object", {}, False),
        ("function", {}, False),
        ("a date, like 2024-01-01", {}, False),
        ("string", {"type": "string"}, False),
        ("integer", {"type": "integer"}, False),
        ("array", {"type": "array"}, False),
        ("", {}, False),
        (None, {}, False),
        (["str", "int"], {"type": ["integer", "string"]}, False),
    ],
)
def test_type_schema(type_text, schema, optional):
    assert xlam.type_schema(type_text) == (schema, optional)


def test_parameters_schema_required_and_kept_keys():
    schema = xlam.parameters_schema(
        {
            "q": {"type": "str", "description": "Query."},
            "limit": {"type": "int", "default": 10},
            "lang": {"type": "str", "default": ""},
            "cb": {"type": "Callable", "description": "Callback."},
            "kind": {"type": "str", "enum": ["a", "b"]},
            "tag": "str",
            "maybe": {"type": "str", "required": False},
        },
        "tools[0].parameters",
    )
    assert schema == {
        "type": "object",
        "properties": {
            "q": {"type": "string", "description": "Query."},
            "limit": {"type": "integer", "default": 10},
            "lang": {"type": "string", "default": ""},
            "cb": {"description": "Callback."},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "tag": {"type": "string"},
            "maybe": {"type": "string"},
        },
        "required": ["q", "cb", "kind", "tag"],
    }
    with pytest.raises(RowReject) as e:
        xlam.parameters_schema({"n": 3}, "tools[0].parameters")
    assert e.value.reason == "bad_tool" and e.value.field == "tools[0].parameters.n"


@pytest.mark.parametrize("path", [PARQUET, DATASET], ids=["parquet", "save_to_disk"])
@pytest.mark.parametrize("fmt", ["xlam", "auto"])
def test_containers(path, fmt):
    records, rejects, result = import_path(path, fmt, "x")
    assert result.format == "xlam"
    assert _counts(result) == {
        "rows": 4,
        "imported": 3,
        "rejected": 1,
        "tasks": 3,
        "no_call_tasks": 1,
        "context_tasks": 0,
        "rejected_by_reason": {"schema_mismatch": 1},
    }
    assert [(r["row"], r["reason"]) for r in rejects] == [(4, "schema_mismatch")]
    assert {t.id: _gold(t) for t in records} == {
        "x-1-0": GOLD["x-1-0"],
        "x-2-0": GOLD["x-2-0"],
        "x-3-0": GOLD["x-3-0"],
    }


@pytest.mark.parametrize("path", [PARQUET, DATASET], ids=["parquet", "save_to_disk"])
def test_containers_hold_the_jsonl_rows(path):
    lines = JSONL.read_text().splitlines()
    expected = [json.loads(lines[n - 1]) for n in (1, 2, 3, 13)]
    assert [r.data for r in read_rows(path)] == expected


def test_import_to_dir(tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    result = import_to_dir(JSONL, "auto", out)
    assert result.source == "xlam" and result.format == "xlam"
    report = json.loads((out / "report.json").read_text())
    assert {k: report[k] for k in REPORT} == REPORT
    assert pq.read_table(out / "tasks.parquet").num_rows == REPORT["tasks"]
    lines = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert {r["row"]: (r["reason"], r["field"]) for r in lines} == REJECTS
    assert next(r for r in lines if r["row"] == 13)["record"]["id"] == 103


XLAM_ROW = {
    "id": 1,
    "query": "5 factorial?",
    "tools": '[{"name": "f", "description": "", "parameters": {}}]',
    "answers": '[{"name": "f", "arguments": {}}]',
}
OPENAI_ROW = {
    "messages": [
        {"role": "user", "content": "5 factorial?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
}
SHAREGPT_ROW = {
    "conversations": [
        {"from": "system", "value": '<tools> [{"name": "f"}] </tools>'},
        {"from": "human", "value": "5 factorial?"},
        {"from": "gpt", "value": '<tool_call>{"name": "f", "arguments": {}}</tool_call>'},
    ]
}


def test_sniff():
    assert xlam.sniff(XLAM_ROW)
    assert not xlam.sniff(OPENAI_ROW)
    assert not xlam.sniff(SHAREGPT_ROW)
    assert not xlam.sniff({**OPENAI_ROW, "query": "q", "answers": "[]"})  # has messages
    assert not xlam.sniff({"query": "q", "tools": "[]"})
    assert not xlam.sniff([XLAM_ROW])
    assert not openai_format.sniff(XLAM_ROW)
    assert not sharegpt.sniff(XLAM_ROW)
    claim = {name for name, m in FORMATS.items() if m.sniff(XLAM_ROW)}
    assert "xlam" in claim and not claim & {"openai", "sharegpt"}


def test_conversation_shape():
    conv = xlam.conversation(XLAM_ROW)
    assert [t.role for t in conv.turns] == ["user", "assistant"]
    assert [c.name for c in conv.turns[1].calls] == ["f"]
    assert conv.domain == "xlam"
    assert conv.tools == [
        {"name": "f", "description": "", "parameters": {}}
    ]  # empty parameters: the common code makes them an empty object schema
