"""Rollouts → padded tensors, and per-token log-probs of a batch under a model.

Shapes: B rollouts, T = the longest trajectory. Position t of every per-token
tensor describes token ``input_ids[:, t]``; the log-prob of token t comes from the
logits at t-1, so column 0 (a prompt token) is never a policy token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from slca.rollout.types import Rollout
from slca.segments import ENV


@dataclass
class Batch:
    input_ids: Tensor
    """(B, T) long, right-padded with ``pad_id``."""
    attention_mask: Tensor
    """(B, T) bool: real tokens."""
    policy_mask: Tensor
    """(B, T) bool: tokens the policy sampled (the loss mask before routing)."""
    old_logprobs: Tensor
    """(B, T) float: log-probs recorded at sampling (0 elsewhere)."""
    kind_codes: Tensor
    """(B, T) long: segment kind per token, ENV (-1) for non-policy tokens."""
    call_index: Tensor
    """(B, T) long: the call block each token belongs to, -1 if none."""
    group_index: Tensor
    """(B,) long: the prompt (group) of each rollout."""

    def to(self, device: torch.device | str) -> Batch:
        return Batch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def select(self, rows: Tensor | Sequence[int]) -> Batch:
        """A minibatch of rows, trimmed to its own longest sequence."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        width = int(self.attention_mask[rows].sum(dim=1).max()) if len(rows) else 0
        return Batch(
            **{
                f.name: (
                    getattr(self, f.name)[rows]
                    if f.name == "group_index"
                    else getattr(self, f.name)[rows, :width]
                )
                for f in fields(self)
            }
        )

    @property
    def n_tokens(self) -> int:
        return int(self.attention_mask.sum())


def collate(rollouts: Sequence[Rollout], pad_id: int) -> Batch:
    """Pad the rollouts' token arrays into one :class:`Batch`."""
    if not rollouts:
        raise ValueError("no rollouts to collate")
    width = max(len(r.token_ids) for r in rollouts)
    B = len(rollouts)
    out = Batch(
        input_ids=torch.full((B, width), pad_id, dtype=torch.long),
        attention_mask=torch.zeros((B, width), dtype=torch.bool),
        policy_mask=torch.zeros((B, width), dtype=torch.bool),
        old_logprobs=torch.zeros((B, width), dtype=torch.float32),
        kind_codes=torch.full((B, width), ENV, dtype=torch.long),
        call_index=torch.full((B, width), -1, dtype=torch.long),
        group_index=torch.tensor([r.group for r in rollouts], dtype=torch.long),
    )
    for i, r in enumerate(rollouts):
        n = len(r.token_ids)
        lengths = {len(r.policy_mask), len(r.logprobs), len(r.kind_codes), len(r.call_index)}
        if lengths != {n}:
            raise ValueError(
                f"rollout {i} (task {r.task_id}): per-token arrays of lengths "
                f"{sorted(lengths)} for {n} tokens"
            )
        out.input_ids[i, :n] = torch.tensor(r.token_ids, dtype=torch.long)
        out.attention_mask[i, :n] = True
        out.policy_mask[i, :n] = torch.tensor(r.policy_mask, dtype=torch.bool)
        out.old_logprobs[i, :n] = torch.tensor(r.logprobs, dtype=torch.float32)
        out.kind_codes[i, :n] = torch.tensor(r.kind_codes, dtype=torch.long)
        out.call_index[i, :n] = torch.tensor(r.call_index, dtype=torch.long)
    if out.policy_mask[:, 0].any():
        raise ValueError("a trajectory starts with a policy token; the prompt must come first")
    return out


def token_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    start: int = 1,
) -> tuple[Tensor, Tensor | None]:
    """Log-prob of every token given its prefix, ``(B, T)``, and optionally the entropy
    of each next-token distribution ``(B, T)``.

    Only positions ``>= start`` are computed (earlier ones are 0): the output layer runs
    on the last ``T - start + 1`` hidden states (``logits_to_keep``), which skips the
    prompt — most of a tool-calling sequence. Right padding needs no position ids:
    real tokens come first in every row. It needs no padding mask either: under the
    causal mask a real token attends only to earlier, real, tokens, so the mask is
    dropped and SDPA runs its causal kernel (SFT 1.3x faster on CPU,
    ``benchmarks/sft_batching.py``); the padded positions' outputs change, the real
    ones' do not. Any other padding keeps its mask.
    """
    width = input_ids.shape[1]
    start = max(1, min(start, width))
    mask = None if is_right_padded(attention_mask) else attention_mask.long()
    kept = model(input_ids=input_ids, attention_mask=mask, logits_to_keep=width - start + 1).logits
    logits = kept[:, :-1].float() / temperature  # predicts tokens start .. T-1
    log_probs = torch.log_softmax(logits, dim=-1)
    picked = log_probs.gather(-1, input_ids[:, start:, None]).squeeze(-1)
    out = picked.new_zeros(input_ids.shape)
    out[:, start:] = picked
    entropy = None
    if with_entropy:  # a metric: no graph through the (B, T, V) product
        with torch.no_grad():
            entropy = out.new_zeros(input_ids.shape)
            entropy[:, start:] = -(log_probs.exp() * log_probs).sum(-1)
    return out, entropy


def is_right_padded(attention_mask: Tensor) -> bool:
    """Whether every row of ``attention_mask (B, T)`` is its real tokens then padding."""
    mask = attention_mask.bool()
    return not bool((mask[:, 1:] & ~mask[:, :-1]).any())


def first_position(mask: Tensor) -> int:
    """The first column holding a True in any row of ``mask (B, T)`` (T if none)."""
    columns = mask.any(dim=0).nonzero()
    return int(columns[0]) if len(columns) else mask.shape[1]
