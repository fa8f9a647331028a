"""Generation engines: one output type for transformers and vLLM (CPU or GPU each).

An engine continues token-id prompts by one assistant turn each and returns the
sampled token ids with their log-probabilities. Log-probabilities are
``log_softmax(logits / temperature)`` of the sampled token (temperature 1 when
greedy) — the quantity the trainer recomputes for the PPO ratio; top-p truncation
is not reflected, as in verl.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 256
    """Tokens one turn may add."""
    temperature: float = 1.0
    """0 samples greedily."""
    top_p: float = 1.0
    seed: int = 0
    """Same prompts, params and seed → same tokens (on the same hardware)."""
    json_schema: Mapping[str, Any] | None = None
    """Constrain the continuation to this JSON Schema (engines with structured
    outputs: vLLM, and the simulator's transformers engine); None: free text."""


@dataclass(frozen=True)
class Generation:
    """One continuation: ``token_ids`` ends with a stop token iff ``stopped``."""

    token_ids: list[int]
    logprobs: list[float]
    stopped: bool


class Engine(Protocol):
    name: str
    shares_module: bool
    """True when the engine generates with the update engine's own module (the HF
    engine): the trainer's weights are already its weights, so no sync happens. An
    engine without the attribute counts as False (it holds a copy: vLLM)."""

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Generation]: ...

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Take the trainer's new weights before the next rollouts."""
        ...


class HFEngine:
    """transformers ``generate``: batched, left-padded, KV-cached; CPU or GPU, on the
    device of ``model``.

    ``shares_module``: ``model`` is the update engine's module (``update.module``, also
    under DDP or DeepSpeed, whose ``update.model`` is a wrapper), so the trainer skips
    the weight sync; False for a copy of its own that takes the trainer's weights
    through :meth:`load_weights` (under ZeRO-3, whose module holds only a shard).
    """

    name = "hf"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        batch_size: int = 16,
        stop_token_ids: Sequence[int] | None = None,
        shares_module: bool = True,
    ):
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token")
        self.shares_module = shares_module
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        stops = stop_token_ids if stop_token_ids is not None else [tokenizer.eos_token_id]
        self.stop_token_ids = sorted({int(t) for t in stops if t is not None})
        if not self.stop_token_ids:
            raise ValueError("no stop token: give stop_token_ids or a tokenizer with eos")

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state_dict)

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Generation]:
        from transformers import GenerationConfig

        if params.json_schema is not None:
            raise ValueError(
                "HFEngine does not constrain decoding; use VLLMEngine or the simulator's "
                "TransformersEngine for json_schema"
            )
        greedy = params.temperature <= 0
        config = GenerationConfig(
            do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p,
            top_k=None,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=self.stop_token_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        temperature = 1.0 if greedy else params.temperature
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()
        # A greedy continuation is the argmax of its own row's logits, which batch-mates
        # change only in the last bits, so prompts go in by length: a chunk pads to a
        # near neighbour's length, not to the longest of 32 arbitrary prompts (the demo
        # SFT's evaluation 0.85 of the time, reports and validations unchanged; ADR
        # 0092). Sampling keeps the given order: which rows share a chunk decides their
        # draws, and a seed must keep giving the same samples.
        order = list(range(len(prompts)))
        if greedy:
            order.sort(key=lambda i: len(prompts[i]))
        out: dict[int, Generation] = {}
        try:
            for start in range(0, len(prompts), self.batch_size):
                rows = order[start : start + self.batch_size]
                chunk = [prompts[i] for i in rows]
                generated = self._generate_chunk(
                    chunk, config, temperature, params.seed + start, device
                )
                for row, generation in zip(rows, generated, strict=True):
                    out[row] = generation
        finally:
            self.model.train(was_training)
        return [out[row] for row in range(len(prompts))]

    def _generate_chunk(self, chunk, config, temperature, seed, device) -> list[Generation]:
        width = max(len(p) for p in chunk)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        attention = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, prompt in enumerate(chunk):  # left padding: every prompt ends at `width`
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention[row, width - len(prompt) :] = 1
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            result = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                generation_config=config,
            )
        new_tokens = result.sequences[:, width:]  # on the model's device, as the logits
        logprobs = (
            torch.stack(
                [
                    torch.log_softmax(step.float() / temperature, dim=-1)
                    .gather(1, new_tokens[:, t : t + 1])
                    .squeeze(1)
                    for t, step in enumerate(result.logits)
                ],
                dim=1,
            ).cpu()
            if result.logits
            else torch.zeros(len(chunk), 0)
        )
        new_tokens = new_tokens.cpu()
        generations = []
        stops = set(self.stop_token_ids)
        for row in range(len(chunk)):
            ids = new_tokens[row].tolist()
            end = next((i + 1 for i, t in enumerate(ids) if t in stops), None)
            keep = end if end is not None else len(ids)
            generations.append(
                Generation(ids[:keep], logprobs[row, :keep].tolist(), stopped=end is not None)
            )
        return generations


def sequence_logprobs(
    model: Any,
    token_ids: Sequence[int],
    temperature: float = 1.0,
) -> torch.Tensor:
    """Log-probability of every token given the ones before it (first token: 0). ``(T,)``."""
    ids = torch.tensor([list(token_ids)], device=next(model.parameters()).device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float() / temperature
    picked = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None]).squeeze(1)
    return torch.cat([picked.new_zeros(1), picked]).cpu()


def text_generator(
    engine: Engine,
    tokenizer: Any,
    params: SamplingParams,
) -> Callable[[list[str]], list[str]]:
    """``generate(prompts) -> replies`` over an engine: each prompt is one user turn
    rendered with the tokenizer's chat template; replies are decoded without the stop
    token. This is how the LLM judge and other text-in/text-out users run on the
    same engines as the policy."""

    def generate(prompts: list[str]) -> list[str]:
        ids = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
            )
            for p in prompts
        ]
        encoded = [tokenizer.encode(text, add_special_tokens=False) for text in ids]
        return [
            tokenizer.decode(g.token_ids, skip_special_tokens=True)
            for g in engine.generate(encoded, params)
        ]

    return generate
