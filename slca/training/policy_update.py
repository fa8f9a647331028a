"""The update phase of an RL step: log-probs before the update, the minibatch updates,
and the gradient probe. The trainer (:mod:`slca.training.rl`) calls these with its
update engine and configuration; the loss itself is :func:`slca.losses.policy_loss`.

Data parallel: every function here works on this rank's ``rows`` of a batch that holds
the whole step (rank order = row order), and runs the same forwards on every rank, as
DDP, DeepSpeed and ZeRO-3's collectives need.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import Tensor

from slca.config.train import TrainConfig
from slca.losses import policy_loss
from slca.training.batch import Batch, first_position, token_logprobs
from slca.training.engines import UpdateEngine

Timed = Callable[[str], AbstractContextManager[Any]]
"""Adds a block's wall time to a phase of the step (``perf/<phase>_s``)."""
Gather = Callable[[Any], list[Any]]
"""A value of every rank, in rank order (``[value]`` in one process)."""


@torch.no_grad()
def old_and_reference_logprobs(
    update: UpdateEngine,
    config: TrainConfig,
    batch: Batch,
    rows: Tensor,
    reference: torch.nn.Module | None,
) -> tuple[Tensor | None, Tensor | None]:
    """Old log-probs (None: on-policy, the live ones are the old ones) and the
    reference model's log-probs (None without a KL term), of this rank's ``rows``;
    each ``(B, T)``, zeros outside ``rows``."""
    settings = config.update
    temperature, size = config.rollout.temperature, settings.micro_batch_size
    old = batch.old_logprobs
    model = update.model
    was_training = model.training
    model.eval()
    try:
        if settings.recompute_old_logprobs:
            # One update per batch: every forward of the update runs before the
            # optimizer step, so its own (detached) log-probs are the old ones and
            # the extra pass (~15% of a CPU step) is skipped, as TRL does.
            single_update = settings.epochs == 1 and settings.minibatches == 1
            old = (
                None
                if single_update
                else chunked_logprobs(update, model, batch, rows, temperature, size)
            )
        ref = None
        if reference is not None and config.algorithm.loss.kl_coef > 0:
            ref = chunked_logprobs(update, reference, batch, rows, temperature, size)
    finally:
        model.train(was_training)
    return old, ref


def chunked_logprobs(
    update: UpdateEngine,
    model: torch.nn.Module,
    batch: Batch,
    rows: Tensor,
    temperature: float,
    size: int,
) -> Tensor:
    """``(B, T)`` log-probs of ``rows`` (zeros elsewhere), ``size`` rows at a time."""
    out = torch.zeros_like(batch.old_logprobs)
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        sub = batch.select(chunk).to(update.device)
        with update.autocast():
            logp, _ = token_logprobs(
                model,
                sub.input_ids,
                sub.attention_mask,
                temperature=temperature,
                start=first_position(sub.policy_mask),
            )
        out[chunk, : logp.shape[1]] = logp.float().cpu()
    return out


def minibatch_updates(
    update: UpdateEngine,
    config: TrainConfig,
    batch: Batch,
    rows: Tensor,
    old: Tensor | None,
    ref: Tensor | None,
    advantages: Tensor,
    loss_mask: Tensor,
    step: int,
    *,
    timed: Timed,
    gather: Gather,
    optimizer_stepped: Callable[[bool], None],
) -> dict[str, float]:
    """The minibatch updates of this rank's ``rows``; metrics over every rank.

    ``advantages`` and ``loss_mask`` are ``(B, T)``; ``old`` and ``ref`` ``(B, T)`` or
    None. Every rank splits its rows into ``update.minibatches`` with the same seeded
    permutation (verl's local shuffle), so the global minibatch is the union of the
    ranks' parts and every rank runs the same micro-batch plan. A micro-batch's loss
    is weighted by its share of the global minibatch's loss units (tokens for
    ``token-mean``, sequences for ``seq-mean-token-mean``), times the world size
    that the gradient average divides by: the gradient is the one-process one.
    A minibatch with a non-finite loss anywhere is skipped whole (see below): its
    gradients are zeroed, none of its metrics count, and ``optimizer_stepped(False)``
    is told (``optimizer_stepped(True)`` after an applied step).
    """
    cfg = config
    update.model.train()
    own = len(rows)
    per_minibatch = own // cfg.update.minibatches
    size = cfg.update.micro_batch_size
    starts = torch.arange(update.world_size) * own  # each rank's first row (rank order)
    units = _loss_units(loss_mask, by_sequence=cfg.algorithm.loss.aggregation != "token-mean")
    generator = torch.Generator().manual_seed(cfg.seed * 7_919 + step)
    totals: dict[str, float] = {}
    weight_sum = 0.0
    grad_norms = []
    gaps: list[tuple[float, float]] = []  # (log-prob gap, tokens) before any step
    for epoch in range(cfg.update.epochs):
        order = torch.randperm(own, generator=generator)
        for m in range(cfg.update.minibatches):
            positions = order[m * per_minibatch : (m + 1) * per_minibatch]
            # (world, rows) the global minibatch: every rank's rows at these positions
            everyone = starts[:, None] + positions[None, :]
            denominator = float(units(everyone.flatten()).sum())
            if denominator == 0:
                continue
            plan = [  # micro-batches with a loss unit on some rank
                s
                for s in range(0, per_minibatch, size)
                if units(everyone[:, s : s + size].flatten()).any()
            ]
            mine = rows[positions]
            update.zero_grad()
            running, weight = _minibatch_backward(
                update,
                cfg,
                batch,
                [mine[s : s + size] for s in plan],
                (units, denominator),
                (old, ref, advantages, loss_mask),
                timed=timed,
                gaps=gaps if epoch == 0 and m == 0 else None,  # before any optimizer step
            )
            with timed("optimizer"):
                grad_norm = update.step()
            if not math.isfinite(grad_norm):
                update.zero_grad()
                optimizer_stepped(False)  # the whole minibatch: none of its metrics count
                continue
            optimizer_stepped(True)
            grad_norms.append(grad_norm)
            for key, value in running.items():
                totals[key] = totals.get(key, 0.0) + value
            weight_sum += weight
    return _actor_metrics(update, gather, totals, weight_sum, grad_norms, gaps)


def _loss_units(loss_mask: Tensor, *, by_sequence: bool) -> Callable[[Tensor], Tensor]:
    """``units(selected)``: the loss units of each row of ``selected`` (tokens, or one per
    sequence with a loss token for the seq-mean-* aggregations)."""

    def units(selected: Tensor) -> Tensor:
        counts = loss_mask[selected].sum(dim=1)
        return (counts > 0).long() if by_sequence else counts

    return units


def _minibatch_backward(
    update: UpdateEngine,
    config: TrainConfig,
    batch: Batch,
    micro_batches: list[Tensor],
    weighting: tuple[Callable[[Tensor], Tensor], float],
    targets: tuple[Tensor | None, Tensor | None, Tensor, Tensor],
    *,
    timed: Timed,
    gaps: list[tuple[float, float]] | None,
) -> tuple[dict[str, float], float]:
    """Forward, loss and backward of one minibatch's ``micro_batches`` (this rank's rows
    of each); ``weighting`` is ``(units, denominator)``, a micro-batch's share being its
    units over the global minibatch's; ``targets`` are ``(old, ref, advantages,
    loss_mask)``. Returns the metrics summed by share and the shares' sum; appends each
    micro-batch's ``(log-prob gap, tokens)`` to ``gaps`` when given."""
    units, denominator = weighting
    loss_mask = targets[3]
    running: dict[str, float] = {}
    weight = 0.0
    for position, micro in enumerate(micro_batches):
        boundary = position == len(micro_batches) - 1
        sub = batch.select(micro).to(update.device)
        mask = loss_mask[micro, : sub.input_ids.shape[1]].to(update.device)
        share = float(units(micro).sum()) / denominator
        with update.micro_batch(boundary=boundary):
            logp, entropy, loss, metrics = _micro_batch_loss(
                update, config, sub, micro, mask, targets
            )
            if gaps is not None:
                gaps.append((logprob_gap(logp, sub, mask), float(mask.sum())))
            if not torch.isfinite(loss):
                # NaN on every gradient: the step (every rank's, the norm is
                # global) sees a non-finite norm and applies nothing, as the
                # engines' overflow checks do; the micro-batches keep their
                # lockstep, which DDP and DeepSpeed need.
                loss = logp.sum() * float("nan")
            # DeepSpeed reduces gradients at the last micro-batch of a minibatch.
            with timed("backward"):
                update.backward(loss * (share * update.world_size), boundary=boundary)
        if share:
            metrics["actor/entropy"] = entropy[mask].mean()
            for key, value in metrics.items():
                running[key] = running.get(key, 0.0) + share * float(value)
            weight += share
    return running, weight


def _micro_batch_loss(
    update: UpdateEngine,
    config: TrainConfig,
    sub: Batch,
    micro: Tensor,
    mask: Tensor,
    targets: tuple[Tensor | None, Tensor | None, Tensor, Tensor],
) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]:
    """``(logp, entropy, loss, metrics)`` of one micro-batch (``sub``, rows ``micro``),
    the forward and the loss in the engine's precision; the backward runs after
    autocast is left, as PyTorch recommends."""
    old, ref, advantages, _ = targets
    loss_cfg, device, width = config.algorithm.loss, update.device, sub.input_ids.shape[1]
    with update.autocast():
        logp, entropy = token_logprobs(
            update.model,
            sub.input_ids,
            sub.attention_mask,
            temperature=config.rollout.temperature,
            with_entropy=True,
            start=first_position(mask),
        )
        loss, metrics = policy_loss(
            logp,
            logp.detach() if old is None else old[micro, :width].to(device),
            advantages[micro, :width].to(device),
            mask,
            clip_low=loss_cfg.clip_low,
            clip_high=loss_cfg.clip_high,
            ref_logp=None if ref is None else ref[micro, :width].to(device),
            kl_coef=loss_cfg.kl_coef,
            aggregation=loss_cfg.aggregation,
            clip_ratio_c=loss_cfg.clip_ratio_c,
            norm_length=config.loss_norm_length,
        )
    return logp, entropy, loss, metrics


def _actor_metrics(
    update: UpdateEngine,
    gather: Gather,
    totals: dict[str, float],
    weight_sum: float,
    grad_norms: list[float],
    gaps: list[tuple[float, float]],
) -> dict[str, float]:
    """The update's ``actor/*`` metrics over every rank: shares are of the global
    minibatch, so the ranks' sums are the global sums."""
    gathered = gather((totals, weight_sum, gaps))
    totals = {k: sum(part[0].get(k, 0.0) for part in gathered) for k in totals}
    weight_sum = sum(part[1] for part in gathered)
    gaps = [gap for part in gathered for gap in part[2]]  # over the global minibatch
    out = {k: v / weight_sum for k, v in totals.items()} if weight_sum else {}
    if grad_norms:
        out["actor/grad_norm"] = sum(grad_norms) / len(grad_norms)
    out["actor/lr"] = float(update.current_lr())
    if gaps:
        out["actor/rollout_logprob_diff"] = sum(g * w for g, w in gaps) / sum(w for _, w in gaps)
    return out


def gradient_cosine(
    update: UpdateEngine,
    config: TrainConfig,
    batch: Batch,
    rows: Tensor,
    old: Tensor | None,
    advantages: Tensor,
    masks: dict[str, Tensor],
) -> float:
    """Cosine between the policy gradients of tool tokens and of summary tokens
    (the paper's orthogonality probe), on the first micro-batch of ``rows`` (rank
    0's are the step's first rows; every rank runs it, for ZeRO-3's collectives);
    ``masks`` are the ``(B, T)`` head masks. NaN when a head is absent."""
    if "tool" not in masks or "summary" not in masks:
        return float("nan")
    model, device = update.module, update.device  # no DDP/DeepSpeed hooks
    rows = rows[: config.update.micro_batch_size]
    sub = batch.select(rows).to(device)
    width = sub.input_ids.shape[1]
    params = [p for p in model.parameters() if p.requires_grad]
    grads, empty = [], False
    for head in ("tool", "summary"):
        mask = masks[head][rows, :width].to(device)
        # no early return: under ZeRO-3 every rank must run the same forwards
        empty = empty or not bool(mask.any())
        with update.autocast():  # the forward only: autograd.grad below runs outside it
            logp, _ = token_logprobs(
                model,
                sub.input_ids,
                sub.attention_mask,
                temperature=config.rollout.temperature,
                start=first_position(mask),
            )
        old_rows = logp.detach() if old is None else old[rows, :width].to(device)
        loss, _ = policy_loss(logp, old_rows, advantages[rows, :width].to(device), mask)
        grad = torch.autograd.grad(loss, params, allow_unused=True)
        grads.append(
            torch.cat(
                [
                    (g if g is not None else torch.zeros_like(p)).flatten()
                    for g, p in zip(grad, params)
                ]
            )
        )
    if empty:
        return float("nan")
    return float(torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0))


def logprob_gap(logp: Tensor, sub: Batch, mask: Tensor) -> float:
    """Mean |trainer log-prob − sampling engine's log-prob| over ``mask``: ~0 when the
    trainer scores tokens as the engine sampled them (same weights, temperature and
    masking); a gap makes the PPO ratio of a reused batch wrong."""
    engine = sub.old_logprobs.to(logp.device)
    return float((logp.detach() - engine)[mask].abs().mean())
