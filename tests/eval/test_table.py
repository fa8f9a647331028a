"""The per-task evaluation table (slca.eval.table): a row per line, the verdict by the
set's own bar, what the model wrote and what was parsed from it."""

import json

from slca.eval.table import COLUMNS, TURN_SEPARATOR, evaluation_table, verdict

TURN = {
    "text": '<tool_call>{"name": "get_weather"}</tool_call>',
    "calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}, "response": {"t": 3}}],
    "call_errors": [],
}
BROKEN = {"text": "<tool_call>{oops</tool_call>", "calls": [], "call_errors": ["bad JSON"]}


def test_a_row_per_line_with_output_parsed_calls_verdict_and_reward_parts():
    lines = [
        {"set": "in_domain", "task_id": "a", "process": 0.95, "summary": 0.5, "calls": 1,
         "redundant": 0, "finish": "stop", "turns": [TURN, BROKEN]},
        {"set": "in_domain", "task_id": "b", "finish": "too_long", "turns": []},
        {"set": "bfcl", "task_id": "c", "valid": False, "error_type": "wrong_name",
         "turns": [TURN]},
        {"set": "tau2", "task_id": "d", "reward": 1.0, "calls": 2, "finish": "stop",
         "turns": [TURN]},
    ]  # fmt: skip
    table = evaluation_table(lines)
    assert tuple(table) == COLUMNS and all(len(v) == 4 for v in table.values())
    assert table["verdict"] == ["pass", "too_long", "fail", "pass"]
    assert table["output"][0] == TURN["text"] + TURN_SEPARATOR + BROKEN["text"]
    assert json.loads(table["parsed_calls"][0]) == TURN["calls"]
    assert json.loads(table["call_errors"][0]) == ["bad JSON"]
    assert table["process"] == [0.95, None, None, None]
    assert table["error_type"][2] == "wrong_name" and table["reward"][3] == 1.0
    assert table["calls"] == [1, 0, 1, 2]  # BFCL's lines count none: the turns do


def test_the_in_domain_bar_is_success_at_0_9():
    assert verdict({"process": 0.9}) == "pass"
    assert verdict({"process": 0.89}) == "fail"
    assert verdict({"process": None, "turns": []}) == "fail"
