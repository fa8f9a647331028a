"""The vLLM engine against the HF engine on the same tiny checkpoint (GPU only)."""

import pytest
import torch

from slca.rollout.engines import SamplingParams, sequence_logprobs
from slca.training.tiny import tiny_model

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("tiny")
    model = tiny_model(tokenizer, seed=3)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model


@pytest.fixture(scope="module")
def engine(checkpoint, tokenizer):
    from slca.rollout.vllm_engine import VLLMEngine

    return VLLMEngine(
        str(checkpoint[0]),
        stop_token_ids=[tokenizer.eos_token_id],
        dtype="float32",
        gpu_memory_utilization=0.2,
    )


def test_logprobs_match_the_hf_model_and_group_members_differ(engine, checkpoint, tokenizer):
    _, model = checkpoint
    prompt = tokenizer.encode("Weather in Rome?")
    out = engine.generate([prompt] * 4, SamplingParams(max_new_tokens=16, temperature=0.9))
    assert len({tuple(g.token_ids) for g in out}) > 1  # one seed per prompt
    for g in out:
        recomputed = sequence_logprobs(model, prompt + g.token_ids, temperature=0.9)
        torch.testing.assert_close(
            recomputed[len(prompt) :], torch.tensor(g.logprobs), atol=2e-3, rtol=2e-3
        )


def test_loaded_weights_change_the_greedy_answer(engine, checkpoint, tokenizer):
    _, model = checkpoint
    prompt = tokenizer.encode("Book a flight")
    greedy = SamplingParams(max_new_tokens=8, temperature=0)
    before = engine.generate([prompt], greedy)[0].token_ids
    perturbed = {k: v + 0.5 * torch.randn_like(v) for k, v in model.state_dict().items()}
    engine.load_weights(perturbed)
    assert engine.generate([prompt], greedy)[0].token_ids != before
