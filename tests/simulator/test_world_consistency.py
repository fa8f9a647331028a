"""The schema simulator answers a generated task's gold calls with the task's facts."""

import pytest

from slca.config.data import SynthParams
from slca.data.synth import DOMAINS, generate
from slca.simulator import Simulator, is_error


def leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    else:
        yield value


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_gold_call_responses_state_every_fact(domain):
    sim = Simulator(seed=11)
    checked = 0
    for task in generate(SynthParams(n_tasks=60, domains=[domain]), seed=3):
        tools = [t.model_dump() for t in task.tools]
        stated = set()
        for step in task.gold:
            for call in step:
                response = sim.execute(
                    tools, call.name, call.arguments, context={"world": task.world}, scope=task.id
                )
                assert not is_error(response), (task.id, response)
                stated.update(repr(v) for v in leaves(response))
        for key, value in task.facts.items():
            if key == "bookings":  # a count of calls, not a value any response carries
                continue
            assert repr(value) in stated, (task.id, key, value)
            checked += 1
    assert checked > 30


def test_a_call_the_world_does_not_know_still_gets_a_valid_made_up_answer():
    task = generate(SynthParams(n_tasks=1, domains=["currency"]), seed=3)[0]
    tools = [t.model_dump() for t in task.tools]
    out = Simulator().execute(
        tools, "get_exchange_rate", {"base": "XXX", "target": "YYY"}, context={"world": task.world}
    )
    assert isinstance(out["rate"], float | int) and out["base"] == "XXX"
