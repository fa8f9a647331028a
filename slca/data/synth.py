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
identical byte for byte for the same parameters, on any machine.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from slca.data.params import SynthParams
from slca.data.record import Call, Message, TaskRecord, ToolSpec

SOURCE = "synth"
SYSTEM_PROMPT = (
    "You are a helpful assistant with access to tools. Call a tool when the request "
    "needs data you do not have; otherwise answer directly."
)

_OPENERS = ("", "Hi! ", "Hello. ", "Quick question: ", "Hey there! ", "Could you help me? ")
_CLOSERS = ("", " Thanks!", " Thank you.", " Please be brief.", " Cheers.")


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


_STR = {"type": "string"}
_NUM = {"type": "number"}
_INT = {"type": "integer"}


def _world(schema: dict[str, Any], pointer: str) -> dict[str, Any]:
    """``schema`` answered from the task's world state at ``pointer`` (see the simulator's
    ``x-world``): a gold call's response then states the task's facts."""
    return {**schema, "x-world": pointer}


# ---------------------------------------------------------------- tool schemas
TOOLS: dict[str, list[ToolSpec]] = {
    "weather": [
        ToolSpec(
            name="get_weather",
            description="Current weather in a city.",
            parameters=_obj(
                {
                    "city": {"type": "string", "description": "City name."},
                    "unit": {
                        "type": "string",
                        "enum": ["celsius", "fahrenheit"],
                        "description": "Temperature unit (default celsius).",
                    },
                },
                ["city"],
            ),
            response=_obj(
                {
                    "city": _STR,
                    "temperature": _world(_NUM, "/weather/{city}/temperature"),
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "condition": _world(
                        {"type": "string", "enum": ["sunny", "cloudy", "rain", "snow", "windy"]},
                        "/weather/{city}/condition",
                    ),
                    "humidity": _world(
                        {"type": "integer", "minimum": 0, "maximum": 100},
                        "/weather/{city}/humidity",
                    ),
                },
                ["city", "temperature", "unit", "condition", "humidity"],
            ),
        ),
        ToolSpec(
            name="find_city",
            description="Look up the city closest to a landmark.",
            parameters=_obj({"landmark": _STR}, ["landmark"]),
            response=_obj(
                {
                    "landmark": _STR,
                    "city": _world(_STR, "/landmarks/{landmark}/city"),
                    "country": _world(_STR, "/landmarks/{landmark}/country"),
                },
                ["landmark", "city", "country"],
            ),
        ),
    ],
    "currency": [
        ToolSpec(
            name="get_exchange_rate",
            description="Exchange rate from one currency to another (ISO 4217 codes).",
            parameters=_obj(
                {
                    "base": {"type": "string", "pattern": "^[A-Z]{3}$"},
                    "target": {"type": "string", "pattern": "^[A-Z]{3}$"},
                },
                ["base", "target"],
            ),
            response=_obj(
                {"base": _STR, "target": _STR, "rate": _world(_NUM, "/rates/{base}/{target}")},
                ["base", "target", "rate"],
            ),
        ),
        ToolSpec(
            name="get_country_currency",
            description="The currency code used in a country.",
            parameters=_obj({"country": _STR}, ["country"]),
            response=_obj(
                {"country": _STR, "currency": _world(_STR, "/country_currency/{country}")},
                ["country", "currency"],
            ),
        ),
    ],
    "flights": [
        ToolSpec(
            name="search_flights",
            description="Flights between two airports on a date; cheapest first.",
            parameters=_obj(
                {
                    "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
                    "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
                    "date": {"type": "string", "format": "date"},
                },
                ["origin", "destination", "date"],
            ),
            response=_obj(
                {
                    "flights": _world(
                        {
                            "type": "array",
                            "items": _obj(
                                {
                                    "flight_id": _STR,
                                    "departure": _STR,
                                    "price": _NUM,
                                    "seats_left": _INT,
                                },
                                ["flight_id", "departure", "price", "seats_left"],
                            ),
                        },
                        "/flights/{origin} {destination} {date}",
                    )
                },
                ["flights"],
            ),
        ),
        ToolSpec(
            name="book_flight",
            description="Book a seat on a flight for a passenger.",
            parameters=_obj({"flight_id": _STR, "passenger": _STR}, ["flight_id", "passenger"]),
            response=_obj(
                {
                    "booking_id": _STR,
                    "flight_id": _STR,
                    "status": _world(
                        {"type": "string", "enum": ["confirmed", "waitlisted"]},
                        "/booking_status/{flight_id}",
                    ),
                },
                ["booking_id", "flight_id", "status"],
            ),
        ),
    ],
    "shop": [
        ToolSpec(
            name="search_products",
            description="Search the catalogue; results sorted by price.",
            parameters=_obj({"query": _STR, "max_price": _NUM}, ["query"]),
            response=_obj(
                {
                    "products": _world(
                        {
                            "type": "array",
                            "items": _obj(
                                {"product_id": _STR, "name": _STR, "price": _NUM, "in_stock": _INT},
                                ["product_id", "name", "price", "in_stock"],
                            ),
                        },
                        "/catalogue/{query}",
                    )
                },
                ["products"],
            ),
        ),
        ToolSpec(
            name="add_to_cart",
            description="Put a quantity of a product into the cart.",
            parameters=_obj(
                {"product_id": _STR, "quantity": {"type": "integer", "minimum": 1}},
                ["product_id", "quantity"],
            ),
            response=_obj(
                {
                    "cart_total": _world(_NUM, "/cart/{product_id}/{quantity}/cart_total"),
                    "items": _world(_INT, "/cart/{product_id}/{quantity}/items"),
                },
                ["cart_total", "items"],
            ),
        ),
        ToolSpec(
            name="get_order_status",
            description="Status of an order.",
            parameters=_obj(
                {"order_id": {"type": "string", "pattern": "^ORD-[0-9]{5}$"}}, ["order_id"]
            ),
            response=_obj(
                {
                    "order_id": _STR,
                    "status": _world(
                        {"type": "string", "enum": ["processing", "shipped", "delivered"]},
                        "/orders/{order_id}/status",
                    ),
                    "eta_days": _world(_INT, "/orders/{order_id}/eta_days"),
                },
                ["order_id", "status", "eta_days"],
            ),
        ),
    ],
}

# ---------------------------------------------------------------- world vocabularies
_CITIES = [
    "Paris",
    "Lyon",
    "Berlin",
    "Madrid",
    "Rome",
    "Oslo",
    "Lisbon",
    "Vienna",
    "Prague",
    "Dublin",
    "Athens",
    "Warsaw",
]
_LANDMARKS = {
    "the Eiffel Tower": ("Paris", "France"),
    "the Colosseum": ("Rome", "Italy"),
    "the Brandenburg Gate": ("Berlin", "Germany"),
    "the Prado Museum": ("Madrid", "Spain"),
    "Belem Tower": ("Lisbon", "Portugal"),
    "the Acropolis": ("Athens", "Greece"),
    "Charles Bridge": ("Prague", "Czechia"),
}
_CONDITIONS = ["sunny", "cloudy", "rain", "snow", "windy"]
_COUNTRIES = {
    "Japan": "JPY",
    "the United Kingdom": "GBP",
    "Switzerland": "CHF",
    "Canada": "CAD",
    "Australia": "AUD",
    "Sweden": "SEK",
    "Mexico": "MXN",
    "India": "INR",
}
_BASES = ["USD", "EUR"]
# Rough units of each currency per US dollar; each world perturbs them by up to 15%.
_PER_USD = {
    "JPY": 150.0,
    "GBP": 0.79,
    "CHF": 0.88,
    "CAD": 1.36,
    "AUD": 1.52,
    "SEK": 10.4,
    "MXN": 18.0,
    "INR": 83.0,
}
_EUR_IN_USD = 1.08
_AIRPORTS = ["CDG", "LHR", "FRA", "MAD", "FCO", "AMS", "LIS", "VIE", "OSL", "DUB"]
_PASSENGERS = [
    "Ana Costa",
    "Li Wei",
    "Sam Okafor",
    "Maria Rossi",
    "John Smith",
    "Aiko Tanaka",
    "Omar Haddad",
]
_PRODUCTS = {
    "headphones": ["Wireless Headphones", "Studio Headphones", "Sport Earbuds"],
    "desk lamp": ["LED Desk Lamp", "Clamp Lamp", "Smart Lamp"],
    "backpack": ["Travel Backpack", "Laptop Backpack", "Hiking Pack"],
    "keyboard": ["Mechanical Keyboard", "Compact Keyboard", "Ergonomic Keyboard"],
}


def _route_key(route: dict[str, str]) -> str:
    return f"{route['origin']} {route['destination']} {route['date']}"


def _new_world(domain: str, rng: random.Random) -> dict[str, Any]:
    if domain == "weather":
        cities = rng.sample(_CITIES, 6)
        return {
            "weather": {
                c: {
                    "temperature": rng.randint(-5, 35),
                    "condition": rng.choice(_CONDITIONS),
                    "humidity": rng.randint(20, 95),
                }
                for c in cities
            },
            "landmarks": {k: {"city": v[0], "country": v[1]} for k, v in _LANDMARKS.items()},
        }
    if domain == "currency":
        per_usd = {t: v * rng.uniform(0.85, 1.15) for t, v in sorted(_PER_USD.items())}
        return {
            "rates": {
                "USD": {t: round(v, 4) for t, v in per_usd.items()},
                "EUR": {t: round(v * _EUR_IN_USD, 4) for t, v in per_usd.items()},
            },
            "country_currency": dict(_COUNTRIES),
        }
    if domain == "flights":
        o, d = rng.sample(_AIRPORTS, 2)
        day = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        flights = [
            {
                "flight_id": f"{o[:2]}{rng.randint(100, 999)}",
                "departure": f"{rng.randint(6, 21):02d}:{rng.choice(['00', '15', '30', '45'])}",
                "price": float(rng.randint(59, 420)),
                "seats_left": rng.randint(1, 9),
            }
            for _ in range(rng.randint(2, 4))
        ]
        flights.sort(key=lambda f: (f["price"], f["flight_id"]))
        route = {"origin": o, "destination": d, "date": day}
        return {
            "route": route,
            "flights": {_route_key(route): flights},
            "booking_status": {f["flight_id"]: "confirmed" for f in flights},
        }
    if domain == "shop":
        query = rng.choice(sorted(_PRODUCTS))
        products = [
            {
                "product_id": f"P{rng.randint(1000, 9999)}",
                "name": n,
                "price": float(rng.randint(15, 250)),
                "in_stock": rng.randint(0, 20),
            }
            for n in _PRODUCTS[query]
        ]
        products.sort(key=lambda p: (p["price"], p["product_id"]))
        orders = {
            f"ORD-{rng.randint(10000, 99999)}": {
                "status": rng.choice(["processing", "shipped", "delivered"]),
                "eta_days": rng.randint(0, 7),
            }
            for _ in range(4)
        }
        return {"query": query, "catalogue": {query: products}, "orders": orders, "cart": {}}
    raise KeyError(domain)


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
                "condition": rng.choice(_CONDITIONS),
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
    base = rng.choice(_BASES)
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
    flights = w["flights"][_route_key(r)]
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
        people = rng.sample(_PASSENGERS, k)
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
        p = rng.choice(_PASSENGERS)
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
    world = _new_world(domain, rng)
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
