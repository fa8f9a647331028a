"""The vLLM engine: offline ``LLM`` in the trainer's process (colocated), GPU only.

Same output as :class:`slca.rollout.engines.HFEngine`: the sampled token ids of
one turn per prompt, with ``log_softmax(logits / temperature)`` log-probabilities
(vLLM's ``processed_logprobs`` mode) and whether a stop token ended the turn. New
weights from the trainer are loaded in place before each round of rollouts.
vLLM is imported only when this engine is built (the ``gpu`` extra).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from slca.rollout.engines import Generation, SamplingParams


class VLLMEngine:
    """Args:
    model: a local HF checkpoint directory.
    stop_token_ids: tokens that end a turn (the chat template's end-of-turn).
    tensor_parallel_size, dtype, gpu_memory_utilization: passed to ``vllm.LLM``.
    llm_options: any other ``vllm.LLM`` keyword.
    """

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        stop_token_ids: Sequence[int],
        tensor_parallel_size: int = 1,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.5,
        seed: int = 0,
        **llm_options: Any,
    ):
        from vllm import LLM

        self.stop_token_ids = sorted({int(t) for t in stop_token_ids})
        self.llm = LLM(
            model=model,
            tensor_parallel_size=tensor_parallel_size,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            **llm_options,
        )

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Generation]:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        greedy = params.temperature <= 0
        # One seed per prompt: a group repeats its prompt G times and must not
        # sample G identical answers.
        sampling = [
            VLLMSamplingParams(
                n=1,
                temperature=0.0 if greedy else params.temperature,
                top_p=1.0 if greedy else params.top_p,
                max_tokens=params.max_new_tokens,
                stop_token_ids=self.stop_token_ids,
                logprobs=0,
                seed=params.seed + i,
                detokenize=False,
                skip_special_tokens=False,
            )
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sampling, use_tqdm=False
        )
        generations = []
        for output in outputs:
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [
                float(step[token].logprob)
                for step, token in zip(completion.logprobs or [], ids, strict=True)
            ]
            stopped = bool(ids) and ids[-1] in self.stop_token_ids
            generations.append(Generation(ids, logprobs, stopped=stopped))
        return generations

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Push the trainer's weights into the colocated vLLM model, then drop stale KV."""
        weights = list(state_dict.items())

        def load(worker: Any) -> None:
            worker.model_runner.model.load_weights(weights)

        self.llm.collective_rpc(load)
        self.llm.reset_prefix_cache()
