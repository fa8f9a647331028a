"""slca's attention (slca/attention.py): transformers' ``sdpa`` numbers, bit for bit,
without repeating key/value heads in CPU decoding."""

import json
from pathlib import Path

import pytest
import torch
from transformers.integrations import sdpa_attention

from slca import attention
from slca.attention import ATTENTION, sdpa_cpu_gqa
from slca.generation.engines import HFEngine, SamplingParams
from slca.modeling import load_causal_lm

DEMO_BASE = Path(__file__).resolve().parents[1] / "assets" / "demo-base"


class Layer(torch.nn.Module):
    num_key_value_groups = 2
    is_causal = True


def qkv(q_len=1, kv_len=37, batch=3, heads=4, kv_heads=2, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, heads, q_len, dim, generator=g)
    key = torch.randn(batch, kv_heads, kv_len, dim, generator=g)
    value = torch.randn(batch, kv_heads, kv_len, dim, generator=g)
    mask = torch.ones(batch, 1, q_len, kv_len, dtype=torch.bool)
    for row in range(batch):  # left padding, as batched generation has
        mask[row, ..., : 5 * row] = False
    return query, key, value, mask


@pytest.mark.parametrize("additive", [False, True])
@pytest.mark.parametrize("kv_len", [1, 37, 700])
def test_a_decoding_step_gives_transformers_numbers_exactly(kv_len, additive):
    query, key, value, mask = qkv(kv_len=kv_len)
    if additive:
        mask = torch.where(mask, 0.0, torch.finfo(torch.float32).min)
    with torch.no_grad():
        ours, _ = sdpa_cpu_gqa(Layer(), query, key, value, mask, scaling=0.35)
        stock, _ = sdpa_attention.sdpa_attention_forward(
            Layer(), query, key, value, mask, scaling=0.35
        )
    assert ours.shape == (3, 1, 4, 8)
    assert torch.equal(ours, stock)


@pytest.mark.parametrize(
    "case",
    ["prefill", "autograd", "no mask", "dropout", "one group", "output_attentions"],
)
def test_everything_but_a_cpu_decoding_step_goes_to_transformers(monkeypatch, case):
    calls = []

    def stock(*args, **kwargs):
        calls.append(args)
        return "stock", None

    monkeypatch.setattr(attention, "sdpa_attention_forward", stock)
    layer = Layer()
    query, key, value, mask = qkv(q_len=5 if case == "prefill" else 1)
    kwargs = {"output_attentions": True} if case == "output_attentions" else {}
    if case == "no mask":
        mask = None
    if case == "one group":
        layer.num_key_value_groups = 1
    with torch.set_grad_enabled(case == "autograd"):
        out, _ = sdpa_cpu_gqa(
            layer, query, key, value, mask, dropout=0.1 if case == "dropout" else 0.0, **kwargs
        )
    assert out == "stock" and len(calls) == 1


def test_loaded_models_attend_with_it_and_checkpoints_do_not_record_it(tmp_path):
    model, _ = load_causal_lm(DEMO_BASE, dtype="float32")
    assert model.config._attn_implementation == ATTENTION
    model.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert ATTENTION not in json.dumps(saved)
    eager, _ = load_causal_lm(DEMO_BASE, dtype="float32")
    eager.set_attn_implementation("eager")
    from slca.attention import attend_with_cpu_gqa

    attend_with_cpu_gqa(eager)  # only transformers' sdpa is switched
    assert eager.config._attn_implementation == "eager"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batched_generation_is_the_same_token_for_token(temperature):
    """The shipped demo base (4 query heads over 2 key/value heads), left-padded prompts
    of different lengths: the same ids and log-probabilities as transformers' sdpa."""
    model, tokenizer = load_causal_lm(DEMO_BASE, dtype="float32")
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    engine = HFEngine(model, tokenizer, batch_size=8)
    prompts = [[(7 * i + 3 * n) % 2000 + 10 for i in range(40 + 23 * n)] for n in range(6)]
    sampling = SamplingParams(max_new_tokens=24, temperature=temperature, seed=5)
    out = {}
    for name in ("sdpa", ATTENTION):
        model.set_attn_implementation(name)
        out[name] = engine.generate(prompts, sampling)
    for a, b in zip(out["sdpa"], out[ATTENTION], strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == b.logprobs
