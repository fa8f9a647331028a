"""The meta-check of tool schemas: ``jsonschema``'s verdict and message, reached fast.

``_schema_error`` vouches for a schema through the Rust structure check plus Python's
``re`` and asks ``jsonschema`` otherwise; these tests hold it to ``jsonschema``'s own
``check_schema`` on known cases and on generated schema-like documents.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from slca.data import checks


def jsonschema_verdict(schema) -> str | None:
    """What ``_schema_error`` reported before the fast path: check_schema's message, on
    the schema as the cache key gives it (keys sorted, as its messages quote them)."""
    schema = json.loads(json.dumps(schema, sort_keys=True))
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as e:
        return f"invalid JSON Schema at '{'/'.join(str(p) for p in e.path)}': {e.message}"
    return None


def verdict(schema) -> str | None:
    return checks._schema_error(json.dumps(schema, sort_keys=True))


KNOWN = [
    {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Z]"}}},
    {"type": 5},
    {"properties": {"a": 5}},
    {"required": "a"},
    {"type": ["string", "string"]},
    {"anyOf": []},
    {"$defs": {"a": {"type": 1}}},
    {"pattern": "[a-"},  # no regex in any dialect
    {"pattern": "(?<name>a)"},  # ECMA's named group; Python's re refuses it
    {"patternProperties": {"(?<x>a)": {"type": "string"}}},
    {"properties": {"pattern": {"type": "string"}}},  # a property named "pattern"
    {"default": {"pattern": "[a-"}},  # a "pattern" that is data, not a keyword
    {"enum": [{"patternProperties": {"[": 1}}]},
    {"$ref": "#/$defs/x", "$defs": {"x": {"type": "integer", "minimum": 0}}},
]


@pytest.mark.parametrize("schema", KNOWN, ids=[json.dumps(s)[:40] for s in KNOWN])
def test_the_verdict_and_message_are_jsonschemas(schema):
    assert verdict(schema) == jsonschema_verdict(schema)


def test_a_pattern_only_python_refuses_is_reported_with_jsonschemas_message():
    """The Rust check leaves formats alone; Python's ``re`` decides "regex" as
    ``jsonschema`` does."""
    message = verdict({"type": "string", "pattern": "(?<name>a)"})
    assert message is not None and message.startswith("invalid JSON Schema at 'pattern'")
    assert "is not a 'regex'" in message


def test_a_valid_schema_never_reaches_the_slow_meta_check(monkeypatch):
    def slow(*args, **kwargs):
        raise AssertionError("check_schema ran for a schema the fast check vouches for")

    monkeypatch.setattr(checks.Draft202012Validator, "check_schema", slow)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert verdict(schema) is None


LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from(["string", "integer", "object", "array", "number", "strin", "#", "#/x"]),
    st.sampled_from(["^a+$", "[a-", "(?<x>a)", "(?P<x>a)", r"\p{L}", r"\d{2}", "a{2,1}", ""]),
)
KEYWORDS = [
    "type", "properties", "items", "required", "enum", "const", "pattern",
    "patternProperties", "minimum", "maxLength", "additionalProperties", "anyOf", "allOf",
    "not", "$defs", "$ref", "default", "format", "description", "dependentRequired",
    "prefixItems", "if", "then", "minItems", "uniqueItems", "propertyNames", "x-extra",
]  # fmt: skip
SCHEMAS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(KEYWORDS), inner, max_size=4),
        st.dictionaries(st.sampled_from(["a", "pattern", "[x-", "b"]), inner, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYWORDS), SCHEMAS, max_size=5))
def test_generated_documents_get_jsonschemas_verdict(schema):
    checks._schema_error.cache_clear()
    assert verdict(schema) == jsonschema_verdict(schema)


WELL_FORMED = st.recursive(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["string", "integer", "number", "boolean", "null"]),
            "pattern": st.sampled_from(["^a+$", r"\d{2}", "(?P<x>a)", "(?<x>a)", "[a-"]),
            "enum": st.lists(st.one_of(st.integers(), st.text(max_size=3)), max_size=3),
            "minimum": st.integers(-5, 5),
            "description": st.text(max_size=5),
        },
    ),
    lambda inner: st.fixed_dictionaries(
        {"type": st.just("object")},
        optional={
            "properties": st.dictionaries(st.sampled_from(["a", "pattern", "b"]), inner),
            "required": st.lists(st.sampled_from(["a", "b"]), unique=True),
            "additionalProperties": st.one_of(st.booleans(), inner),
            "patternProperties": st.dictionaries(st.sampled_from(["^x", "[", "(?<n>y)"]), inner),
            "items": inner,
        },
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(WELL_FORMED)
def test_well_formed_schemas_get_jsonschemas_verdict(schema):
    """Mostly valid schemas, so the fast path's "valid" is the answer checked."""
    checks._schema_error.cache_clear()
    assert verdict(schema) == jsonschema_verdict(schema)
