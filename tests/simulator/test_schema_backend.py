import random

import jsonschema
import jsonschema_rs
import pytest

from slca.simulator.backends import CallRequest
from slca.simulator.schema_backend import Generator, SchemaBackend, SchemaGenerationError

# One schema per keyword family, plus nested and recursive ones.
SCHEMAS = {
    "types": {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "n": {"type": "number"},
            "b": {"type": "boolean"},
            "z": {"type": "null"},
            "multi": {"type": ["integer", "null"]},
        },
        "required": ["s", "i", "n", "b", "z", "multi"],
        "additionalProperties": False,
    },
    "enum_const": {
        "type": "object",
        "properties": {
            "unit": {"enum": ["c", "f", 3, None]},
            "v": {"const": {"fixed": [1, 2]}},
        },
        "required": ["unit", "v"],
    },
    "numeric_bounds": {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 5, "maximum": 6},
            "b": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3},
            "c": {"type": "number", "minimum": -1.5, "maximum": -1.25},
            "d": {"type": "integer", "multipleOf": 7, "minimum": 10, "maximum": 30},
            "e": {"type": "number", "multipleOf": 0.5, "minimum": 1, "maximum": 2},
            "f": {"type": "number", "exclusiveMinimum": 0.0, "exclusiveMaximum": 0.05},
        },
        "required": list("abcdef"),
    },
    "lengths": {
        "type": "object",
        "properties": {
            "short": {"type": "string", "maxLength": 2},
            "long": {"type": "string", "minLength": 20},
            "exact": {"type": "string", "minLength": 4, "maxLength": 4},
        },
        "required": ["short", "long", "exact"],
    },
    "pattern": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
            "word": {"type": "string", "pattern": "^(yes|no)+$"},
        },
        "required": ["code", "word"],
    },
    "arrays": {
        "type": "object",
        "properties": {
            "bounded": {
                "type": "array",
                "items": {"type": "integer"},
                "minItems": 2,
                "maxItems": 3,
            },
            "empty_ok": {"type": "array", "items": {"type": "string"}, "maxItems": 0},
            "tuple": {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "integer"}],
                "items": False,
                "minItems": 2,
            },
            "unique": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 50},
                "minItems": 4,
                "uniqueItems": True,
            },
        },
        "required": ["bounded", "empty_ok", "tuple", "unique"],
    },
    "combinators": {
        "type": "object",
        "properties": {
            "one": {
                "oneOf": [{"type": "string", "maxLength": 3, "minLength": 3}, {"type": "integer"}]
            },
            "any": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
            "all": {
                "allOf": [
                    {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
                    {"properties": {"y": {"type": "string"}}, "required": ["y"]},
                ]
            },
            "bounded_all": {
                "allOf": [{"type": "integer", "minimum": 3}, {"type": "integer", "maximum": 4}]
            },
        },
        "required": ["one", "any", "all", "bounded_all"],
    },
    "refs": {
        "$defs": {
            "money": {
                "type": "object",
                "properties": {
                    "amount": {"type": "number", "minimum": 0},
                    "currency": {"enum": ["EUR", "USD"]},
                },
                "required": ["amount", "currency"],
            }
        },
        "type": "object",
        "properties": {
            "price": {"$ref": "#/$defs/money"},
            "fee": {"$ref": "#/$defs/money"},
        },
        "required": ["price", "fee"],
    },
    "formats": {
        "type": "object",
        "properties": {
            "d": {"type": "string", "format": "date"},
            "dt": {"type": "string", "format": "date-time"},
            "e": {"type": "string", "format": "email"},
            "u": {"type": "string", "format": "uri"},
            "id": {"type": "string", "format": "uuid"},
        },
        "required": ["d", "dt", "e", "u", "id"],
    },
    "nested": {
        "type": "object",
        "properties": {
            "orders": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "lines": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "sku": {"type": "string", "pattern": "^SKU[0-9]{3}$"},
                                    "qty": {"type": "integer", "minimum": 1},
                                },
                                "required": ["sku", "qty"],
                            },
                        },
                    },
                    "required": ["id", "lines"],
                },
            }
        },
        "required": ["orders"],
    },
    "recursive": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["name"],
            }
        },
        "$ref": "#/$defs/node",
    },
    "untyped": {"properties": {"anything": {}, "flag": True}, "required": ["anything", "flag"]},
}


def validate(schema, value):
    """Two independent validators must both accept the value."""
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    assert jsonschema_rs.validator_for(schema, validate_formats=True).is_valid(value)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("seed", range(25))
def test_generated_values_validate(name, seed):
    schema = SCHEMAS[name]
    validate(schema, Generator(schema, random.Random(seed)).value())


def test_generation_is_deterministic_by_seed_and_varies_across_seeds():
    schema = SCHEMAS["nested"]
    first = [Generator(schema, random.Random(s)).value() for s in range(10)]
    again = [Generator(schema, random.Random(s)).value() for s in range(10)]
    assert first == again
    assert len({repr(v) for v in first}) > 5


def tool(response, parameters=None):
    return {
        "name": "t",
        "description": "",
        "parameters": parameters or {"type": "object"},
        "response": response,
    }


def test_backend_echoes_arguments_and_world_state_into_same_named_fields():
    response = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "temp_c": {"type": "number"},
            "days": {"type": "integer"},
        },
        "required": ["city", "temp_c", "days"],
    }
    request = CallRequest(
        tool(response), {"city": "Oslo", "days": "three"}, {"world": {"temp_c": -3.5}}, seed=1
    )
    out = SchemaBackend().propose(request)
    assert out["city"] == "Oslo" and out["temp_c"] == -3.5
    assert isinstance(out["days"], int)  # "three" does not fit an integer: not echoed
    retry = SchemaBackend().propose(
        CallRequest(tool(response), {"city": "Oslo"}, seed=1, attempt=1)
    )
    assert retry["city"] != "Oslo"  # a retry drops the hints


def test_backend_without_response_schema_says_ok():
    assert SchemaBackend().propose(CallRequest(tool(None), {})) == {"status": "ok"}


@pytest.mark.parametrize(
    "schema, message",
    [
        ({"type": "integer", "minimum": 5, "maximum": 1}, "empty numeric range"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength 5 > maxLength 2"),
        ({"type": "array", "minItems": 3, "maxItems": 1}, "minItems 3 > maxItems 1"),
        ({"enum": []}, "empty enum"),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "nothing in common"),
        ({"type": "object", "required": ["x"], "additionalProperties": False}, "not in properties"),
        ({"$ref": "#/$defs/missing"}, "does not resolve"),
        ({"$ref": "https://example.com/schema"}, "only local"),
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
        ({"type": "integer", "multipleOf": 10, "minimum": 1, "maximum": 9}, "no multiple"),
        ({"type": "widget"}, "unknown type"),
        (False, "accepts no value"),
    ],
)
def test_contradictory_or_unsupported_schemas_raise_a_named_error(schema, message):
    with pytest.raises(SchemaGenerationError, match=message):
        Generator(schema, random.Random(0)).value()


def test_string_typed_responses_reach_the_caller_as_strings():
    # τ² tools answer plain text ("Transfer successful"); the simulator parses str
    # proposals as JSON, so the backend must not hand it a bare string.
    from slca.simulator import Simulator

    tool = {
        "name": "transfer",
        "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}},
        "response": {"type": "string", "minLength": 3},
    }
    sim = Simulator()
    response = sim.call(tool, {"summary": "help"})
    assert isinstance(response, str) and len(response) >= 3
    assert sim.stats.failures == 0 and sim.stats.invalid == 0
