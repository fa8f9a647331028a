import itertools

import jsonschema_rs
import pytest

from slca.simulator import Simulator, SimulatorLimits, is_error

WEATHER = {
    "name": "get_weather",
    "description": "Current weather and forecast for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "units": {"enum": ["c", "f"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
    "response": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "temp": {"type": "number", "minimum": -40, "maximum": 50},
            "condition": {"enum": ["sunny", "rain", "snow"]},
            "forecast": {
                "type": "array",
                "minItems": 1,
                "maxItems": 7,
                "items": {
                    "type": "object",
                    "properties": {
                        "date": {"type": "string", "format": "date"},
                        "high": {"type": "integer"},
                    },
                    "required": ["date", "high"],
                },
            },
        },
        "required": ["city", "temp", "condition", "forecast"],
    },
}


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def code(response):
    assert is_error(response), response
    return response["error"]["code"]


class Scripted:
    """A backend that replays proposals, to drive the retry and failure paths."""

    name = "scripted"

    def __init__(self, *proposals):
        self.proposals = itertools.cycle(proposals)
        self.requests = []

    def propose(self, request):
        self.requests.append(request)
        value = next(self.proposals)
        if isinstance(value, Exception):
            raise value
        return value


class Counter:
    """A nondeterministic backend, like an LLM sampling at temperature > 0."""

    name = "counter"

    def __init__(self):
        self.n = 0

    def propose(self, request):
        self.n += 1
        return {"n": self.n}


def test_valid_call_returns_a_schema_valid_response_with_the_argument_echoed():
    sim = Simulator(seed=3)
    out = sim.call(WEATHER, {"city": "Lyon", "days": 2})
    assert jsonschema_rs.validator_for(WEATHER["response"], validate_formats=True).is_valid(out)
    assert out["city"] == "Lyon"


def test_responses_are_deterministic_in_seed_tool_and_canonical_arguments():
    a = Simulator(seed=1).call(WEATHER, {"city": "Lyon", "days": 2})
    b = Simulator(seed=1).call(WEATHER, {"days": 2, "city": "Lyon"})  # key order irrelevant
    c = Simulator(seed=2).call(WEATHER, {"city": "Lyon", "days": 2})
    assert a == b and a != c


@pytest.mark.parametrize(
    "arguments, fragment",
    [
        ({"city": 3}, '$.city: 3 is not of type "string"'),
        ({}, '"city" is a required property'),
        ({"city": "x", "days": 9}, "$.days: 9 is greater than the maximum of 7"),
        ({"city": "x", "extra": 1}, "Additional properties are not allowed"),
        ([1, 2], "arguments must be a JSON object, got list"),
        ("city=Paris", "arguments must be a JSON object, got str"),
        ({"city": "x" * 2_000_000}, "over the 65536 limit"),
        ({"city": "x", "deep": nested(10_000)}, "not JSON"),
        ({"city": "x", "deep": nested(40)}, "nest deeper than 32"),
        ({"city": float("nan")}, "not JSON"),
    ],
)
def test_invalid_calls_get_invalid_arguments_naming_the_problem(arguments, fragment):
    backend = Scripted({"never": "asked"})
    sim = Simulator(backend)
    out = sim.call(WEATHER, arguments)
    assert code(out) == "invalid_arguments"
    assert fragment in out["error"]["message"]
    assert backend.requests == []  # like a 4xx: no model is asked
    assert sim.stats.invalid_arguments == 1


def test_unknown_tools_are_named_with_the_ones_the_task_has():
    sim = Simulator()
    out = sim.execute([WEATHER], "get_wether", {"city": "x"})
    assert code(out) == "unknown_tool" and "get_weather" in out["error"]["message"]
    assert sim.execute([WEATHER], "get_weather", {"city": "x"})["city"] == "x"
    assert sim.stats.unknown_tool == 1 and sim.stats.calls == 2


def test_openai_nested_function_form_is_understood():
    nested = {
        "type": "function",
        "function": {k: v for k, v in WEATHER.items() if k != "response"},
        "response": WEATHER["response"],
    }
    assert Simulator().execute([nested], "get_weather", {"city": "Rome"})["city"] == "Rome"


def test_invalid_proposals_are_retried_then_counted():
    good = {
        "city": "a",
        "temp": 1,
        "condition": "rain",
        "forecast": [{"date": "2025-01-01", "high": 3}],
    }
    backend = Scripted("not json", {"city": "a"}, good)
    sim = Simulator(backend, limits=SimulatorLimits(max_retries=2))
    assert sim.call(WEATHER, {"city": "a"}) == good
    assert [r.attempt for r in backend.requests] == [0, 1, 2]
    assert len({r.seed for r in backend.requests}) == 1
    assert (sim.stats.proposals, sim.stats.invalid, sim.stats.retries) == (3, 2, 2)
    assert sim.stats.as_metrics()["sim/invalid_rate"] == pytest.approx(2 / 3)


def test_persistently_invalid_or_crashing_backends_become_simulator_failures():
    sim = Simulator(
        Scripted({"city": 1}, RuntimeError("model crashed")), limits=SimulatorLimits(max_retries=3)
    )
    out = sim.call(WEATHER, {"city": "a"})
    assert code(out) == "simulator_failure"
    assert "after 4 attempts" in out["error"]["message"]
    assert sim.stats.failures == 1 and sim.stats.invalid == 4


@pytest.mark.parametrize(
    "response, fragment",
    [
        ({"type": "integer", "minimum": 3, "maximum": 1}, "empty numeric range"),
        ({"type": "string", "not": {"type": "string"}}, "approximately: ['not']"),
        (
            {
                "$defs": {
                    "a": {
                        "type": "object",
                        "properties": {"a": {"$ref": "#/$defs/a"}},
                        "required": ["a"],
                    }
                },
                "$ref": "#/$defs/a",
            },
            "deeper than",
        ),
        ({"type": "nope"}, "response is not a valid JSON Schema"),
    ],
)
def test_bad_response_schemas_give_failures_not_crashes(response, fragment):
    out = Simulator().call(
        {"name": "t", "parameters": {"type": "object"}, "response": response}, {}
    )
    assert code(out) == "simulator_failure" and fragment in out["error"]["message"]


def test_a_broken_parameters_schema_is_the_tools_fault_not_the_calls():
    out = Simulator().call({"name": "t", "parameters": {"type": 5}}, {})
    assert code(out) == "simulator_failure"
    assert "parameters is not a valid JSON Schema" in out["error"]["message"]


def test_identical_calls_in_one_scope_get_identical_responses_even_from_a_sampler():
    backend = Counter()
    sim = Simulator(backend)
    tool = {"name": "t", "parameters": {"type": "object"}, "response": None}
    group_a = [sim.call(tool, {"q": 1}, scope="group-a") for _ in range(8)]
    assert group_a == [{"n": 1}] * 8
    assert sim.call(tool, {"q": 1}, scope="group-b") == {"n": 2}
    assert sim.call(tool, {"q": 2}, scope="group-a") == {"n": 3}
    assert sim.stats.cache_hits == 7
    group_a[0]["n"] = 99  # callers get copies: mutating one cannot poison the cache
    assert sim.call(tool, {"q": 1}, scope="group-a") == {"n": 1}


def test_sqlite_cache_persists_responses_across_simulators(tmp_path):
    path = tmp_path / "cache" / "sim.sqlite"
    tool = {"name": "t", "parameters": {"type": "object"}, "response": None}
    with Simulator(Counter(), cache_path=path) as sim:
        first = sim.call(tool, {"q": 1}, scope="task-7")
    with Simulator(Counter(), cache_path=path) as sim:
        assert sim.call(tool, {"q": 1}, scope="task-7") == first
        assert sim.stats.cache_hits == 1
        assert sim.call(tool, {"q": 1}, scope="task-8") == {"n": 1}


def test_stats_reset_and_metric_names():
    sim = Simulator()
    sim.call(WEATHER, {"city": "a"})
    sim.call(WEATHER, {"city": "a"})
    metrics = sim.stats.as_metrics()
    assert set(metrics) == {
        "sim/calls",
        "sim/cache_hit_rate",
        "sim/invalid_rate",
        "sim/failure_rate",
        "sim/latency_ms",
    }
    assert metrics["sim/cache_hit_rate"] == 0.5
    sim.stats.reset()
    assert sim.stats.calls == 0 and sim.stats.latency_s == 0.0


def test_unknown_backend_and_options_are_errors():
    with pytest.raises(ValueError, match="unknown simulator backend 'oracle'"):
        Simulator("oracle")
    with pytest.raises(TypeError, match="takes no options"):
        Simulator("schema", model="x")
    with pytest.raises(TypeError, match="a tool spec is a mapping with a 'name'"):
        Simulator().call({"parameters": {}}, {})
