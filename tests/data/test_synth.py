import collections

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


def test_every_task_passes_the_record_checks():
    for r in generate(SynthParams(n_tasks=200), 1):
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


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_gold_and_facts_agree_with_world(domain):
    p = SynthParams(n_tasks=40, domains=[domain])
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


def test_multi_step_second_call_needs_first_result():
    for r in generate(SynthParams(n_tasks=80, mix={"multi_step": 1}), 2):
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
