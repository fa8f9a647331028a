"""The controlled task generator: the in-domain set for credit-assignment experiments.

Each task gets its own seeded world state (cities and their weather, exchange rates,
flights, a shop's catalogue and orders); the gold calls and the facts a good summary
states are read off that world, so a schema-backed simulator that answers from
``record.world`` is consistent with the gold. Requests are paraphrased from several
templates with varied openers and closers. Task kinds:

- ``single``: one call;
- ``parallel``: one step of 2..max_parallel independent calls;
- ``multi_step``: a call whose result (an id) the next call needs;
- ``no_call``: a request that needs no API (gold is empty).

Everything is drawn from ``random.Random(f"{seed}:{domain}:{index}")``, so output is
identical byte for byte for the same parameters, on any machine. The tool catalogue and
the worlds are in :mod:`slca.data.synth_world`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from slca.config.data import SynthParams
from slca.data.record import Call, Message, TaskRecord
from slca.data.synth_world import BASES, CONDITIONS, PASSENGERS, TOOLS, new_world, route_key

__all__ = ["DOMAINS", "SOURCE", "SYSTEM_PROMPT", "TOOLS", "generate", "generate_task", "task_kind"]

SOURCE = "synth"
SYSTEM_PROMPT = (
    "You are a helpful assistant with access to tools. Call a tool when the request "
    "needs data you do not have; otherwise answer directly."
)

_OPENERS = ("", "Hi! ", "Hello. ", "Quick question: ", "Hey there! ", "Could you help me? ")
_CLOSERS = ("", " Thanks!", " Thank you.", " Please be brief.", " Cheers.")


# ---------------------------------------------------------------- task builders
# Each builder returns (request text, gold steps, facts) from the world.
Built = tuple[str, list[list[Call]], dict[str, Any]]


def _weather(kind: str, w: dict, rng: random.Random, k: int) -> Built:
    cities = list(w["weather"])
    if kind == "single":
        c = rng.choice(cities)
        text = rng.choice(
            [
                "What's the weather like in {c} right now?",
                "How warm is it in {c} at the moment?",
                "Tell me the current conditions in {c}.",
                "Is it sunny in {c} today?",
            ]
        ).format(c=c)
        return (
            text,
            [[Call(name="get_weather", arguments={"city": c})]],
            {
                f"{c}.temperature": w["weather"][c]["temperature"],
                f"{c}.condition": w["weather"][c]["condition"],
            },
        )
    if kind == "parallel":
        cs = rng.sample(cities, k)
        lst = ", ".join(cs[:-1]) + " and " + cs[-1]
        text = rng.choice(
            [
                "Compare the current weather in {l}.",
                "What is the temperature in {l} right now?",
                "I'm choosing between {l}: how is the weather in each?",
            ]
        ).format(l=lst)
        facts = {f"{c}.temperature": w["weather"][c]["temperature"] for c in cs}
        return text, [[Call(name="get_weather", arguments={"city": c}) for c in cs]], facts
    if kind == "multi_step":
        lm = rng.choice(sorted(w["landmarks"]))
        city = w["landmarks"][lm]["city"]
        w["weather"].setdefault(
            city,
            {
                "temperature": rng.randint(-5, 35),
                "condition": rng.choice(CONDITIONS),
                "humidity": rng.randint(20, 95),
            },
        )
        text = rng.choice(
            [
                "I'm visiting {lm} tomorrow. What's the weather there now?",
                "How's the weather near {lm}?",
                "Find the city of {lm} and tell me its current weather.",
            ]
        ).format(lm=lm)
        return (
            text,
            [
                [Call(name="find_city", arguments={"landmark": lm}, label="var1")],
                [Call(name="get_weather", arguments={"city": city})],
            ],
            {
                "city": city,
                f"{city}.temperature": w["weather"][city]["temperature"],
                f"{city}.condition": w["weather"][city]["condition"],
            },
        )
    text = rng.choice(
        [
            "What does 'humidity' actually measure?",
            "Why is it usually colder at night?",
            "Can you explain the difference between weather and climate?",
        ]
    )
    return text, [], {}


def _currency(kind: str, w: dict, rng: random.Random, k: int) -> Built:
    rates = w["rates"]
    base = rng.choice(BASES)
    targets = sorted(rates[base])
    if kind == "single":
        t = rng.choice(targets)
        text = rng.choice(
            [
                "What's the {b} to {t} exchange rate?",
                "How many {t} do I get for one {b}?",
                "Give me today's rate from {b} to {t}.",
            ]
        ).format(b=base, t=t)
        return (
            text,
            [[Call(name="get_exchange_rate", arguments={"base": base, "target": t})]],
            {f"{base}/{t}": rates[base][t]},
        )
    if kind == "parallel":
        ts = rng.sample(targets, k)
        lst = ", ".join(ts[:-1]) + " and " + ts[-1]
        text = rng.choice(
            ["What are the {b} exchange rates to {l}?", "Show me how {b} converts to {l} today."]
        ).format(b=base, l=lst)
        return (
            text,
            [[Call(name="get_exchange_rate", arguments={"base": base, "target": t}) for t in ts]],
            {f"{base}/{t}": rates[base][t] for t in ts},
        )
    if kind == "multi_step":
        country = rng.choice(sorted(w["country_currency"]))
        t = w["country_currency"][country]
        text = rng.choice(
            [
                "I'm travelling to {c}. How much of their currency is one {b}?",
                "What's the rate from {b} to the currency used in {c}?",
            ]
        ).format(c=country, b=base)
        return (
            text,
            [
                [Call(name="get_country_currency", arguments={"country": country}, label="var1")],
                [Call(name="get_exchange_rate", arguments={"base": base, "target": t})],
            ],
            {"currency": t, f"{base}/{t}": rates[base][t]},
        )
    text = rng.choice(
        [
            "What is an exchange rate, in one sentence?",
            "Why do currencies have three-letter codes?",
            "Is it cheaper to exchange money at the airport? Just general advice.",
        ]
    )
    return text, [], {}


def _flights(kind: str, w: dict, rng: random.Random, k: int) -> Built:
    r = w["route"]
    flights = w["flights"][route_key(r)]
    search = Call(name="search_flights", arguments=dict(r), label="var1")
    if kind == "single":
        text = rng.choice(
            [
                "Find flights from {origin} to {destination} on {date}.",
                "Which flights go {origin} -> {destination} on {date}?",
                "Search {origin} to {destination} for {date}, please.",
            ]
        ).format(**r)
        cheapest = flights[0]
        return (
            text,
            [[search.model_copy(update={"label": None})]],
            {"cheapest_flight": cheapest["flight_id"], "cheapest_price": cheapest["price"]},
        )
    if kind == "parallel":
        people = rng.sample(w.get("passengers", PASSENGERS), k)
        f = rng.choice(flights)
        lst = ", ".join(people[:-1]) + " and " + people[-1]
        text = rng.choice(
            ["Book flight {f} for {p}.", "Please reserve seats on {f} for {p}, one booking each."]
        ).format(f=f["flight_id"], p=lst)
        return (
            text,
            [
                [
                    Call(
                        name="book_flight", arguments={"flight_id": f["flight_id"], "passenger": p}
                    )
                    for p in people
                ]
            ],
            {"flight_id": f["flight_id"], "bookings": len(people)},
        )
    if kind == "multi_step":
        p = rng.choice(w.get("passengers", PASSENGERS))
        cheapest = flights[0]
        text = rng.choice(
            [
                "Book the cheapest flight from {origin} to {destination} on {date} for {p}.",
                "{p} needs to fly {origin} to {destination} on {date}; book the lowest fare.",
            ]
        ).format(p=p, **r)
        return (
            text,
            [
                [search],
                [
                    Call(
                        name="book_flight",
                        arguments={"flight_id": cheapest["flight_id"], "passenger": p},
                    )
                ],
            ],
            {"flight_id": cheapest["flight_id"], "price": cheapest["price"]},
        )
    text = rng.choice(
        [
            "How early should I get to the airport for an international flight?",
            "What does 'layover' mean?",
            "Any tips for sleeping on a long flight?",
        ]
    )
    return text, [], {}


def _shop(kind: str, w: dict, rng: random.Random, k: int) -> Built:
    q = w["query"]
    orders = sorted(w["orders"])
    if kind == "single":
        o = rng.choice(orders)
        text = rng.choice(
            ["Where is my order {o}?", "What's the status of order {o}?", "Has {o} shipped yet?"]
        ).format(o=o)
        return (
            text,
            [[Call(name="get_order_status", arguments={"order_id": o})]],
            {f"{o}.status": w["orders"][o]["status"], f"{o}.eta_days": w["orders"][o]["eta_days"]},
        )
    if kind == "parallel":
        os_ = rng.sample(orders, k)
        lst = ", ".join(os_[:-1]) + " and " + os_[-1]
        text = rng.choice(["Check the status of orders {l}.", "Where are my orders {l}?"]).format(
            l=lst
        )
        return (
            text,
            [[Call(name="get_order_status", arguments={"order_id": o}) for o in os_]],
            {f"{o}.status": w["orders"][o]["status"] for o in os_},
        )
    if kind == "multi_step":
        n = rng.randint(1, 3)
        best = w["catalogue"][q][0]
        w["cart"] = {
            best["product_id"]: {str(n): {"cart_total": round(best["price"] * n, 2), "items": n}}
        }
        text = rng.choice(
            [
                "Add {n} of the cheapest {q} to my cart.",
                "Find a {q}, the lowest-priced one, and put {n} in my cart.",
            ]
        ).format(n=n, q=q)
        return (
            text,
            [
                [Call(name="search_products", arguments={"query": q}, label="var1")],
                [
                    Call(
                        name="add_to_cart",
                        arguments={"product_id": best["product_id"], "quantity": n},
                    )
                ],
            ],
            {"product": best["name"], "cart_total": round(best["price"] * n, 2)},
        )
    text = rng.choice(
        [
            "What's a good way to compare two products before buying?",
            "How do online return policies usually work?",
            "Should I buy a mechanical keyboard? Just your general opinion.",
        ]
    )
    return text, [], {}


DOMAINS: dict[str, Callable[[str, dict, random.Random, int], Built]] = {
    "weather": _weather,
    "currency": _currency,
    "flights": _flights,
    "shop": _shop,
}


def _paraphrase(text: str, rng: random.Random) -> str:
    return f"{rng.choice(_OPENERS)}{text}{rng.choice(_CLOSERS)}"


def _pick(weights: dict[str, float], rng: random.Random) -> str:
    kinds = sorted(weights)
    return rng.choices(kinds, weights=[weights[k] for k in kinds])[0]


def task_kind(record: TaskRecord) -> str:
    """single / parallel / multi_step / no_call, read off the gold."""
    if not record.gold:
        return "no_call"
    if len(record.gold) > 1:
        return "multi_step"
    return "parallel" if len(record.gold[0]) > 1 else "single"


def generate_task(index: int, domain: str, params: SynthParams, seed: int) -> TaskRecord:
    """Task ``index`` of ``domain``: a pure function of its arguments."""
    rng = random.Random(f"{seed}:{domain}:{index}")
    kind = _pick(dict(params.mix), rng)
    world = new_world(domain, rng, params.values)
    k = rng.randint(2, params.max_parallel)
    text, gold, facts = DOMAINS[domain](kind, world, rng, k)
    others = [t for d in sorted(TOOLS) if d != domain for t in TOOLS[d]]
    n_distractors = rng.randint(0, min(params.max_distractors, len(others)))
    tools = list(TOOLS[domain]) + rng.sample(others, n_distractors)
    rng.shuffle(tools)
    return TaskRecord(
        id=f"synth-{domain}-{index:06d}",
        source=SOURCE,
        domain=domain,
        split="train",  # assigned by slca.data.splits
        messages=[
            Message(role="system", content=SYSTEM_PROMPT),
            Message(role="user", content=_paraphrase(text, rng)),
        ],
        tools=tools,
        gold=gold,
        facts=facts,
        world=world,
        eval_only=False,
    )


def generate(params: SynthParams, seed: int) -> list[TaskRecord]:
    """``params.n_tasks`` tasks, domains taken in turn."""
    return [
        generate_task(i, params.domains[i % len(params.domains)], params, seed)
        for i in range(params.n_tasks)
    ]
