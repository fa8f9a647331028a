import collections
import hashlib

import pytest

from slca.config.data import SynthParams
from slca.data.checks import record_problems
from slca.data.synth import DOMAINS, TOOLS, generate, generate_task, task_kind


def _dump(records) -> bytes:
    return "\n".join(r.model_dump_json() for r in records).encode()


def test_same_seed_same_bytes():
    p = SynthParams(n_tasks=60)
    assert _dump(generate(p, 7)) == _dump(generate(p, 7))


def test_different_seed_differs():
    p = SynthParams(n_tasks=20)
    assert _dump(generate(p, 7)) != _dump(generate(p, 8))


def test_task_is_independent_of_how_many_are_generated():
    small, big = generate(SynthParams(n_tasks=5), 3), generate(SynthParams(n_tasks=50), 3)
    assert _dump(small) == _dump(big[:5])


@pytest.mark.parametrize("values", ["demo", "wide"])
def test_every_task_passes_the_record_checks(values):
    for r in generate(SynthParams(n_tasks=200, values=values), 1):
        assert record_problems(r.model_dump()) == [], r.id


def test_tool_schemas_are_complete():
    for tools in TOOLS.values():
        for t in tools:
            assert t.response is not None and t.parameters["type"] == "object"


def test_mix_is_respected():
    p = SynthParams(n_tasks=800, mix={"single": 1, "parallel": 1, "multi_step": 1, "no_call": 1})
    counts = collections.Counter(task_kind(r) for r in generate(p, 0))
    assert set(counts) == {"single", "parallel", "multi_step", "no_call"}
    assert all(150 <= c <= 250 for c in counts.values()), counts


def test_zero_weight_kind_never_appears():
    p = SynthParams(n_tasks=100, mix={"single": 1, "parallel": 0, "multi_step": 0, "no_call": 0})
    assert {task_kind(r) for r in generate(p, 0)} == {"single"}


def test_parallel_width_is_bounded():
    p = SynthParams(n_tasks=120, mix={"parallel": 1}, max_parallel=2)
    assert all(len(r.gold) == 1 and len(r.gold[0]) == 2 for r in generate(p, 0))


@pytest.mark.parametrize("values", ["demo", "wide"])
@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_gold_and_facts_agree_with_world(domain, values):
    p = SynthParams(n_tasks=40, domains=[domain], values=values)
    for r in generate(p, 5):
        w = r.world
        calls = [c for step in r.gold for c in step]
        if domain == "weather":
            for c in calls:
                if c.name == "get_weather":
                    city = c.arguments["city"]
                    assert r.facts.get(f"{city}.temperature") == w["weather"][city]["temperature"]
        if domain == "flights" and task_kind(r) == "multi_step":
            (flights,) = w["flights"].values()
            assert (
                calls[1].arguments["flight_id"]
                == min(flights, key=lambda f: f["price"])["flight_id"]
            )
        if domain == "shop" and task_kind(r) == "multi_step":
            assert calls[1].arguments["product_id"] == w["catalogue"][w["query"]][0]["product_id"]
        if domain == "currency":
            for c in calls:
                if c.name == "get_exchange_rate":
                    a = c.arguments
                    rate = w["rates"][a["base"]][a["target"]]
                    assert r.facts[f"{a['base']}/{a['target']}"] == rate


@pytest.mark.parametrize("values", ["demo", "wide"])
def test_multi_step_second_call_needs_first_result(values):
    for r in generate(SynthParams(n_tasks=80, mix={"multi_step": 1}, values=values), 2):
        assert len(r.gold) == 2 and r.gold[0][0].label == "var1"
        # the id used in step 2 is not in the request: the model must call step 1 first
        if r.domain in ("flights", "shop"):
            ident = next(iter(v for k, v in r.gold[1][0].arguments.items() if k.endswith("_id")))
            assert ident not in r.user_text(), r.id


def test_requests_are_paraphrased():
    texts = {r.user_text() for r in generate(SynthParams(n_tasks=200, domains=["weather"]), 0)}
    assert len(texts) > 150


def test_unknown_domain_is_rejected():
    with pytest.raises(ValueError, match="unknown domains"):
        SynthParams(domains=["weather", "stocks"])


def test_the_params_know_exactly_the_generators_domains():
    # params validates names without importing the generator; the two lists must agree
    from slca.config.data import SYNTH_DOMAINS

    assert set(SYNTH_DOMAINS) == set(DOMAINS) == set(TOOLS)
    assert SynthParams(domains=list(SYNTH_DOMAINS)).domains == list(SYNTH_DOMAINS)


def test_generate_task_ids_are_unique_and_stable():
    p = SynthParams(n_tasks=30)
    rs = generate(p, 4)
    assert len({r.id for r in rs}) == 30
    assert generate_task(17, rs[17].domain, p, 4) == rs[17]


# --- values: wide (the pretrain corpus) ---------------------------------------------------

DEMO_SHA256 = "9100a3992b41934d628824bc3da4427570ebe5f7b5e9e78e9d04eeb331e379ce"
"""sha256 of the JSON of generate(SynthParams(n_tasks=2000), 13), prepare's synth tasks,
as they were before values 'wide' existed."""

LATER_FROM_REQUEST = {
    ("book_flight", "passenger"),
    ("get_exchange_rate", "base"),
    ("add_to_cart", "quantity"),
}
"""Arguments of a multi-step task's second call that the request gives (the others come
from the first call's result)."""


def _sha256(records) -> str:
    digest = hashlib.sha256()
    for r in records:
        digest.update(r.model_dump_json().encode())
    return digest.hexdigest()


def request_values(record):
    """``("tool.argument", value)`` of each gold argument its task kind reads from the
    request: every argument of the first step, those of LATER_FROM_REQUEST after it."""
    for i, step in enumerate(record.gold):
        for call in step:
            for arg, value in call.arguments.items():
                if i == 0 or (call.name, arg) in LATER_FROM_REQUEST:
                    yield f"{call.name}.{arg}", value


def test_demo_values_are_the_default_and_unchanged():
    assert SynthParams().values == "demo"
    assert _sha256(generate(SynthParams(n_tasks=2000), 13)) == DEMO_SHA256


def test_wide_values_are_deterministic_and_differ_from_demo():
    wide = SynthParams(n_tasks=80, values="wide")
    tasks = generate(wide, 7)
    assert _dump(tasks) == _dump(generate(wide, 7))
    assert _dump(tasks) != _dump(generate(SynthParams(n_tasks=80), 7))
    assert _dump(tasks) != _dump(generate(wide, 8))
    assert generate_task(41, tasks[41].domain, wide, 7) == tasks[41]


def test_most_wide_cities_airports_and_passengers_are_made_up():
    from slca.data.synth_world import _AIRPORTS, _CITIES, PASSENGERS

    pools = {
        "get_weather.city": _CITIES,
        "search_flights.origin": _AIRPORTS,
        "search_flights.destination": _AIRPORTS,
        "book_flight.passenger": PASSENGERS,
    }
    for values, low, high in (("demo", 0.0, 0.0), ("wide", 0.6, 0.9)):
        p = SynthParams(n_tasks=400, domains=["weather", "flights"], values=values)
        seen = collections.defaultdict(list)
        for r in generate(p, 11):
            for key, value in request_values(r):
                if key in pools:
                    seen[key].append(value not in pools[key])
        assert set(seen) == set(pools)
        for key, made_up in seen.items():
            assert low <= sum(made_up) / len(made_up) <= high, (values, key)


def test_every_value_a_wide_task_reads_from_its_request_is_in_the_request():
    seen = collections.Counter()
    for r in generate(SynthParams(n_tasks=400, values="wide"), 11):
        for key, value in request_values(r):
            assert str(value) in r.user_text(), (r.id, key, value)
            seen[key] += 1
    assert set(seen) == {
        "get_weather.city",
        "find_city.landmark",
        "get_exchange_rate.base",
        "get_exchange_rate.target",
        "get_country_currency.country",
        "search_flights.origin",
        "search_flights.destination",
        "search_flights.date",
        "book_flight.flight_id",
        "book_flight.passenger",
        "get_order_status.order_id",
        "search_products.query",
        "add_to_cart.quantity",
    }
