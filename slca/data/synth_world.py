"""The controlled generator's tool catalogue and worlds: each domain's tool schemas
(answered from the task's world state through ``x-world``) and the seeded world a task
is built on (cities and their weather, exchange rates, flights, a shop's catalogue and
orders)."""

from __future__ import annotations

import random
from typing import Any

from slca.data.record import ToolSpec


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
CONDITIONS = ["sunny", "cloudy", "rain", "snow", "windy"]
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
BASES = ["USD", "EUR"]
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
PASSENGERS = [
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


# Syllables of made-up names: a wide value pool has too many names to memorise, so a
# policy trained on it must copy a value from the request (see SynthParams.values).
_SYLLABLES = (
    "ka",
    "lo",
    "mer",
    "vin",
    "sa",
    "dor",
    "tel",
    "bra",
    "nu",
    "ost",
    "ri",
    "gan",
    "pe",
    "lun",
    "zia",
    "hol",
    "mi",
    "tar",
    "wen",
    "cor",
    "fi",
    "dal",
    "ven",
    "quo",
)
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _made_up_name(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _names(pool: list[str], k: int, values: str, rng: random.Random, made_up) -> list[str]:
    """``k`` distinct names: from ``pool`` (values 'demo'), or, with values 'wide', each
    made up with probability 3/4 (otherwise from ``pool``)."""
    if values == "demo":
        return rng.sample(pool, k)
    names: list[str] = []
    while len(names) < k:
        name = made_up(rng) if rng.random() < 0.75 else rng.choice(pool)
        if name not in names:
            names.append(name)
    return names


def _made_up_person(rng: random.Random) -> str:
    return f"{_made_up_name(rng)} {_made_up_name(rng)}"


def _made_up_airport(rng: random.Random) -> str:
    return "".join(rng.choice(_LETTERS) for _ in range(3))


def route_key(route: dict[str, str]) -> str:
    """The key of a flight route in a world's ``flights``."""
    return f"{route['origin']} {route['destination']} {route['date']}"


def new_world(domain: str, rng: random.Random, values: str = "demo") -> dict[str, Any]:
    """A task's world state for ``domain``, drawn from ``rng``; ``values`` 'wide' makes
    most cities, airports and passengers up (SynthParams.values)."""
    if domain == "weather":
        cities = _names(_CITIES, 6, values, rng, _made_up_name)
        return {
            "weather": {
                c: {
                    "temperature": rng.randint(-5, 35),
                    "condition": rng.choice(CONDITIONS),
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
        o, d = _names(_AIRPORTS, 2, values, rng, _made_up_airport)
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
        people = (
            {}
            if values == "demo"
            else {"passengers": _names(PASSENGERS, 5, values, rng, _made_up_person)}
        )
        return {
            **people,
            "route": route,
            "flights": {route_key(route): flights},
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
