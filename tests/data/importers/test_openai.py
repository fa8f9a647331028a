"""The openai (TRL / HF chat) importer and the import runner, on a hand-written fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from slca.data import io
from slca.data.importers import REASONS, import_path, import_to_dir
from slca.data.importers.rows import InputError

FIXTURE = Path(__file__).parents[2] / "fixtures" / "imports" / "openai" / "tasks.jsonl"

EXPECTED_REJECTS = {
    6: "bad_json",
    7: "bad_arguments",
    8: "unknown_tool",
    9: "schema_mismatch",
    10: "duplicate_tools",
    11: "no_user_turn",
    12: "no_answer",
    13: "no_tools",
    14: "bad_tool",
    15: "bad_message",
    16: "unknown_format",
    17: "bad_json",
}

EXPECTED_GOLD = {
    "mine-1-0": [[("get_weather", {"city": "Oslo"})]],
    "mine-2-0": [
        [
            ("get_weather", {"city": "Rome", "unit": "F"}),
            ("get_weather", {"city": "Madrid", "unit": "F"}),
        ]
    ],
    "mine-3-0": [
        [("convert", {"amount": 100, "src": "EUR", "dst": "USD"})],
        [("get_weather", {"city": "Boston"})],
    ],
    "mine-4-0": [[("get_weather", {"city": "Lima"})]],
    "mine-4-1": [],
    "mine-5-0": [],
}


@pytest.fixture(scope="module")
def imported():
    return import_path(FIXTURE, "auto", "mine")


def test_every_row_is_imported_or_rejected_with_its_reason(imported):
    records, rejects, result = imported
    assert result.format == "openai"
    assert (result.rows, result.imported, result.rejected, result.tasks) == (17, 5, 12, 6)
    assert result.imported + result.rejected == result.rows
    assert {line["row"]: line["reason"] for line in rejects} == EXPECTED_REJECTS
    assert result.rejected_by_reason == {
        reason: list(EXPECTED_REJECTS.values()).count(reason)
        for reason in set(EXPECTED_REJECTS.values())
    }
    # every reason the runner knows is exercised by this fixture, but the size limits'
    # (tests/data/test_limits.py: a fixture row over them would be megabytes)
    assert set(EXPECTED_REJECTS.values()) == set(REASONS) - {"over_limit"}


def test_gold_calls_equal_the_hand_written_expectation(imported):
    records, _, _ = imported
    got = {r.id: [[(c.name, c.arguments) for c in step] for step in r.gold] for r in records}
    assert got == EXPECTED_GOLD
    assert all(c.arguments_known for r in records for step in r.gold for c in step)


def test_the_second_user_turn_keeps_the_first_as_context(imported):
    records, _, _ = imported
    by_id = {r.id: r for r in records}
    follow_up = by_id["mine-4-1"]
    assert [m.role for m in follow_up.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    call_turn = follow_up.messages[1]
    assert [(c.name, c.arguments) for c in call_turn.tool_calls] == [
        ("get_weather", {"city": "Lima"})
    ]
    assert follow_up.messages[2].name == "get_weather"  # found through tool_call_id
    assert follow_up.answer == "You're welcome."
    assert by_id["mine-1-0"].answer == "It is 4 °C in Oslo."
    assert by_id["mine-3-0"].domain == "finance"
    # the conversation's tasks share the key that keeps them in one split
    assert follow_up.conversation_text() == by_id["mine-4-0"].conversation_text()


def test_reject_lines_name_the_row_field_and_keep_the_record(imported):
    _, rejects, _ = imported
    by_row = {line["row"]: line for line in rejects}
    assert by_row[9]["field"] == "messages[1].tool_calls[0].arguments"
    assert "city" in by_row[9]["message"] and "is a required property" in by_row[9]["message"]
    assert by_row[17]["record"] == "{this line is not JSON"
    assert by_row[8]["record"]["messages"][0]["content"] == "Book a flight."


def test_import_to_dir_writes_tasks_report_and_rejects(tmp_path, imported):
    records, _, _ = imported
    result = import_to_dir(FIXTURE, "openai", tmp_path / "out", source="mine")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "rejects.jsonl",
        "report.json",
        "tasks.parquet",
    ]
    report = json.loads((out / "report.json").read_text())
    assert {k: report[k] for k in ("format", "rows", "imported", "rejected", "tasks")} == {
        "format": "openai",
        "rows": 17,
        "imported": 5,
        "rejected": 12,
        "tasks": 6,
    }
    assert sum(report["rejected_by_reason"].values()) == report["rejected"]
    assert len((out / "rejects.jsonl").read_text().splitlines()) == 12
    assert io.read_records(out / "tasks.parquet") == records
    assert result.summary().startswith(
        f"{FIXTURE}: openai: 17 rows, 5 imported (6 tasks), 12 rejected"
    )


def test_eval_split_marks_tasks_eval_only(tmp_path):
    records, _, _ = import_path(FIXTURE, "openai", "mine", split="eval")
    assert records and all(r.split == "eval" and r.eval_only for r in records)


def test_a_failed_import_leaves_an_existing_output_untouched(tmp_path):
    out = tmp_path / "out"
    import_to_dir(FIXTURE, "openai", out, source="mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(InputError):
        import_to_dir(tmp_path / "missing.jsonl", "openai", out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_streamed_parquet_output_holds_every_task_in_batches(tmp_path):
    rows = FIXTURE.read_text().splitlines()[:5] * 500  # 2,500 rows, 3,000 tasks
    big = tmp_path / "big.jsonl"
    big.write_text("\n".join(rows) + "\n")
    result = import_to_dir(big, "auto", tmp_path / "out")
    assert (result.rows, result.tasks) == (2500, 3000)
    assert pq.ParquetFile(tmp_path / "out" / "tasks.parquet").metadata.num_rows == 3000


def test_the_summary_line_names_every_reason_and_counts_in_words(tmp_path, imported):
    _, _, result = imported
    reasons = (
        "bad_json (2), bad_arguments (1), bad_message (1), bad_tool (1), duplicate_tools (1), "
        "no_answer (1), no_tools (1), no_user_turn (1), schema_mismatch (1), "
        "unknown_format (1), unknown_tool (1)"
    )
    assert result.summary() == (
        f"{FIXTURE}: openai: 17 rows, 5 imported (6 tasks), 12 rejected: {reasons}"
    )
    # prepare's one-line error shows the first reasons and says how many it leaves out
    assert result.top_reasons(2) == "bad_json (2), bad_arguments (1), …, 9 more"
    assert result.top_reasons(11) == reasons
    one = tmp_path / "one.jsonl"
    one.write_text(FIXTURE.read_text().splitlines()[0] + "\n")
    _, _, single = import_path(one, "openai", "one")
    assert single.summary() == f"{one}: openai: 1 row, 1 imported (1 task), 0 rejected"
