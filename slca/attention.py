"""transformers' SDPA attention, with grouped-query heads handed to torch in CPU decoding.

transformers' ``sdpa`` attention repeats each key and value head for its query heads
(``repeat_kv``, a copy of the whole cache per layer and token) whenever an attention mask
is given, because CUDA's fused kernels take grouped-query attention only without one.
Batched generation always has a mask (left padding), so on CPU every decoding step
copied its KV cache twice over: in the demo's profile, ``repeat_kv`` and the attention
around it took ~160 s of its ~340 s of decoding. torch's CPU kernel takes grouped heads
with a mask (``enable_gqa=True``) and computes the same numbers without the copy.

:data:`ATTENTION` is that attention: in a CPU decoding step without autograd it calls
``scaled_dot_product_attention`` with ``enable_gqa=True``; everything else (prefill,
training, GPUs, a position bias, a paged cache) goes to transformers' own function
unchanged. Its masks are transformers' ``sdpa`` masks. See
docs/adr/0091-grouped-query-attention-in-cpu-decoding.md.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

ATTENTION = "sdpa_cpu_gqa"
"""The name models loaded by :func:`slca.modeling.load_causal_lm` attend with."""


def _grouped_decode_step(module: Any, query: torch.Tensor, mask: Any, kwargs: dict) -> bool:
    """A step :func:`sdpa_cpu_gqa` computes itself: one query token per row against a
    cache of fewer key/value heads, on CPU, under a mask, nothing else asked for."""
    return (
        query.device.type == "cpu"
        and query.shape[2] == 1
        and getattr(module, "num_key_value_groups", 1) > 1
        and mask is not None
        and not torch.is_grad_enabled()
        and not kwargs.get("output_attentions")
        and kwargs.get("position_bias") is None
        and kwargs.get("cache") is None
    )


def sdpa_cpu_gqa(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa_attention_forward``, except in a CPU decoding step.

    query [batch, heads, q_len, head_dim]; key, value [batch, kv_heads, kv_len,
    head_dim]; attention_mask [batch, 1, q_len, kv_len] (bool or additive) or None.
    Returns ([batch, q_len, heads, head_dim], None), as transformers' function does.
    """
    if dropout or not _grouped_decode_step(module, query, attention_mask, kwargs):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    # one query token: transformers passes is_causal=False here too (q_len == 1)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, sdpa_cpu_gqa)
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)


def attend_with_cpu_gqa(model: Any) -> None:
    """Switch a model that attends with transformers' ``sdpa`` to :data:`ATTENTION`
    (others, e.g. ``eager``, keep theirs). Not saved with the model: a checkpoint's
    config.json stays as transformers writes it."""
    if getattr(model.config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(ATTENTION)
