"""Policy loss: token-level clipped surrogate with an optional k3 KL term (DESIGN §2).

The loss consumes per-token advantages and never knows which estimator made them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from slca.config.names import AGGREGATIONS, Aggregation


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(π‖π_ref): ``exp(r) − r − 1`` with ``r = ref − logp``.

    Non-negative and unbiased for samples from π (Schulman's k3). ``(B, T)`` → ``(B, T)``.
    """
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1.0


def aggregate(
    values: Tensor, mask: Tensor, how: Aggregation = "token-mean", norm_length: float = 1.0
) -> Tensor:
    """Reduce ``(B, T)`` per-token values over ``mask`` to a scalar.

    ``token-mean``: mean over all masked tokens of the batch (long rollouts weigh
    more). ``seq-mean-token-mean``: mean over tokens within each sequence, then
    over sequences that have at least one masked token (each sequence weighs the same,
    so a token of a long sequence weighs less: GRPO's length bias).
    ``seq-mean-token-sum-norm``: sum over tokens within each sequence divided by the
    constant ``norm_length``, then the mean over sequences with a masked token
    (Dr. GRPO: every token weighs the same, and, unlike token-mean, the weight does not
    depend on how many tokens the batch holds). With no masked token the result is 0
    and still connected to the graph, so ``backward()`` works.
    """
    weight = mask.to(values.dtype)
    masked = values * weight
    if how == "token-mean":
        return masked.sum() / weight.sum().clamp(min=1.0)
    if how in ("seq-mean-token-mean", "seq-mean-token-sum-norm"):
        per_seq_count = weight.sum(dim=1)
        if how == "seq-mean-token-mean":
            per_seq = masked.sum(dim=1) / per_seq_count.clamp(min=1.0)
        else:
            if norm_length <= 0:
                raise ValueError(f"norm_length must be > 0, got {norm_length}")
            per_seq = masked.sum(dim=1) / norm_length
        has_tokens = (per_seq_count > 0).to(values.dtype)
        return (per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    raise ValueError(f"unknown loss aggregation {how!r}; valid: {', '.join(AGGREGATIONS)}")


def aggregation_units(mask: Tensor, how: Aggregation = "token-mean") -> float:
    """What :func:`aggregate` averages over in ``mask (B, T)``: masked tokens
    (``token-mean``) or sequences with a masked token (the ``seq-mean-*`` modes).

    A loss over a minibatch split into micro-batches is the sum of each micro-batch's
    aggregate weighted by its units over the minibatch's units; this keeps the split
    exact for every mode.
    """
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {how!r}; valid: {', '.join(AGGREGATIONS)}")
    if how == "token-mean":
        return float(mask.sum())
    return float(mask.any(dim=1).sum()) if mask.shape[1] else 0.0


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    aggregation: Aggregation = "token-mean",
    clip_ratio_c: float | None = None,
    norm_length: float = 1.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO-style clipped surrogate per token, plus ``kl_coef ·`` k3 KL, aggregated.

    Args:
        logp: ``(B, T)`` log-probs of the sampled tokens under the current policy (with grad).
        old_logp: ``(B, T)`` log-probs under the policy that sampled them (no grad).
        advantages: ``(B, T)`` per-token advantages; 0 on tokens that get no credit.
        mask: ``(B, T)`` bool, the tokens that carry loss (policy tokens).
        clip_low, clip_high: the ratio is clipped to ``[1 − clip_low, 1 + clip_high]``
            (separate bounds, as in DAPO's clip-higher).
        ref_logp: ``(B, T)`` log-probs under the frozen reference; needed when ``kl_coef > 0``.
        kl_coef: weight of the k3 KL term in the loss.
        aggregation: ``token-mean``, ``seq-mean-token-mean`` or
            ``seq-mean-token-sum-norm`` (see :func:`aggregate`).
        norm_length: the constant divisor of ``seq-mean-token-sum-norm``.
        clip_ratio_c: dual clip (verl's, Ye et al. 2020), > 1: a token with a negative
            advantage loses ``min(-A · clip_ratio_c, clipped surrogate)``, so a ratio
            far above ``1 + clip_high`` cannot grow its loss (and gradient) without
            bound. None: off.

    Returns:
        ``(loss, metrics)``; metrics are detached 0-dim tensors ``actor/pg_loss``,
        ``actor/clipfrac`` (share of masked tokens where the clipped branch is
        active), ``actor/kl`` (mean k3 over masked tokens; present when
        ``ref_logp`` is given), ``actor/ratio_mean``, and with ``clip_ratio_c``
        ``actor/clipfrac_lower`` (share of masked tokens the dual clip bounds).
    """
    _check_loss_args(
        logp, old_logp, advantages, mask, ref_logp, clip_low, clip_high, kl_coef, clip_ratio_c
    )
    mask = mask.bool()

    # Masked positions may hold padding garbage; keep them out of exp().
    log_ratio = torch.where(mask, logp - old_logp, 0.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg_per_token = torch.maximum(unclipped, clipped)
    dual_bound = None
    if clip_ratio_c is not None:
        lower = -advantages * clip_ratio_c
        dual_bound = (advantages < 0) & (pg_per_token > lower)
        pg_per_token = torch.where(dual_bound, lower, pg_per_token)
    pg_loss = aggregate(pg_per_token, mask, aggregation, norm_length)
    loss = pg_loss

    metrics = {
        "actor/pg_loss": pg_loss.detach(),
        "actor/clipfrac": aggregate((clipped > unclipped).float(), mask).detach(),
        "actor/ratio_mean": aggregate(ratio.detach(), mask),
    }
    if dual_bound is not None:
        metrics["actor/clipfrac_lower"] = aggregate(dual_bound.float(), mask).detach()
    if ref_logp is not None:
        # Zero both sides off the mask so padding (even -inf) cannot leak NaN into grads.
        kl = k3_kl(torch.where(mask, logp, 0.0), torch.where(mask, ref_logp, 0.0))
        metrics["actor/kl"] = aggregate(kl.detach(), mask)
        if kl_coef > 0:
            loss = loss + kl_coef * aggregate(kl, mask, aggregation, norm_length)
    return loss, metrics


def _check_loss_args(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    ref_logp: Tensor | None,
    clip_low: float,
    clip_high: float,
    kl_coef: float,
    clip_ratio_c: float | None,
) -> None:
    """The errors :func:`policy_loss` raises on bad shapes or settings, in its order."""
    if not (logp.shape == old_logp.shape == advantages.shape == mask.shape):
        raise ValueError(
            "logp, old_logp, advantages and mask must share one shape (B, T); got "
            f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(advantages.shape)}, "
            f"{tuple(mask.shape)}"
        )
    if clip_low < 0 or clip_high < 0 or clip_low >= 1:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0; got {clip_low}, {clip_high}")
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if clip_ratio_c is not None and not clip_ratio_c > 1:
        raise ValueError(f"clip_ratio_c must be > 1 (or None: off), got {clip_ratio_c}")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError("kl_coef > 0 needs ref_logp")
    if ref_logp is not None and ref_logp.shape != logp.shape:
        raise ValueError(f"ref_logp shape {tuple(ref_logp.shape)} != logp {tuple(logp.shape)}")
