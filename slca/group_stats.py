"""Group statistics the advantage estimators share (:mod:`slca.advantages`): rewards
z-scored within groups of rollouts of the same prompt (float64, or the reference's
float32 arithmetic), and per-rollout values written onto token masks. Pure functions;
the estimators and their registry stay in :mod:`slca.advantages`."""

from __future__ import annotations

import torch
from torch import Tensor

from slca.config.names import Numerics, Singleton


def group_zscore(
    scores: Tensor,
    group_index: Tensor,
    present: Tensor | None = None,
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    numerics: Numerics = "float64",
    singleton: Singleton = "zero",
) -> Tensor:
    """Z-score ``scores`` within groups, over the present members only.

    Args:
        scores: ``(N,)`` float; values of absent members are ignored (may be NaN).
        group_index: ``(N,)`` int group ids.
        present: ``(N,)`` bool, default all True.
        numerics: ``"float64"``: statistics in float64, and a group whose present
            members are all equal gets exactly 0. ``"float32"``: the reference's
            arithmetic, bit for bit: scores cast to float32, each group's mean and
            unbiased std as torch computes them for the group's float32 values stacked
            in row order (float32 sum / count; the std's sum of squares in float64),
            ``(s - mean) / (std + eps)`` in float32, no zero-std branch.
        singleton: a group with one present member gets 0 (``"zero"``) or, as verl's
            GRPO, mean 0 and std 1 (``"raw"``: ``s / (1 + eps)``; ``s`` unnormalised).

    Returns:
        ``(N,)`` float32: ``(s - mean) / (std + eps)`` (unbiased std) for present
        members of groups with at least 2 present members (``s - mean`` when
        ``norm_by_std`` is False; float64: exactly 0 when they are all equal); the
        ``singleton`` rule for groups of one; exactly 0 for absent members.
    """
    if present is None:
        present = torch.ones_like(group_index, dtype=torch.bool)
    _, inverse = torch.unique(group_index, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    if numerics == "float32":
        return group_zscore_float32(scores, inverse, n_groups, present, norm_by_std, eps, singleton)
    x = torch.where(present, scores.double(), 0.0)
    weight = present.double()
    count = torch.zeros(n_groups, dtype=torch.float64, device=x.device).index_add_(
        0, inverse, weight
    )
    total = torch.zeros_like(count).index_add_(0, inverse, x)
    mean = total / count.clamp(min=1.0)
    deviation = (x - mean[inverse]) * weight
    if norm_by_std:
        sq = torch.zeros_like(count).index_add_(0, inverse, deviation * deviation)
        std = (sq / (count - 1.0).clamp(min=1.0)).sqrt()
        deviation = deviation / (std[inverse] + eps)
    # A constant group carries no signal; rounding in the mean must not invent one.
    lo = torch.full_like(count, torch.inf).scatter_reduce_(
        0, inverse, torch.where(present, x, torch.inf), "amin"
    )
    hi = torch.full_like(count, -torch.inf).scatter_reduce_(
        0, inverse, torch.where(present, x, -torch.inf), "amax"
    )
    valid = present & (count[inverse] >= 2) & (hi > lo)[inverse]
    out = torch.where(valid, deviation, 0.0)
    if singleton == "raw":
        alone = present & (count[inverse] == 1)
        out = torch.where(alone, x / (1.0 + eps) if norm_by_std else x, out)
    return out.float()


def group_zscore_float32(
    scores: Tensor,
    inverse: Tensor,
    n_groups: int,
    present: Tensor,
    norm_by_std: bool,
    eps: float,
    singleton: Singleton,
) -> Tensor:
    """:func:`group_zscore` with ``numerics="float32"``.

    The float32 mean must be summed in torch's order for a 1-D tensor of the group's
    length: groups are bucketed by size and each bucket summed as one ``(groups,
    size)`` matrix, whose contiguous rows torch sums in that order (tested bit for bit
    against the per-group loop). The std's sum of squares is float64 accumulated in row
    order, as torch's full reduction does, so one ``index_add_`` serves every group.
    """
    x = scores.float()
    device = x.device
    key = torch.where(present, inverse, n_groups)  # absent rows: a group of their own
    count = torch.bincount(key, minlength=n_groups + 1)[:n_groups]
    # Present rows grouped together, row order within a group; absent rows last.
    order = torch.argsort(key, stable=True)
    sizes = set(count.tolist())
    mean = torch.zeros(n_groups, dtype=torch.float32, device=device)
    if len(sizes) == 1 and (size := sizes.pop()) >= 2:  # the usual case: one group size
        mean = x[order[: n_groups * size]].view(n_groups, size).sum(dim=1) / size
    else:
        first = torch.cumsum(count, 0) - count
        for size in sorted(sizes - {0, 1}):
            groups = (count == size).nonzero().squeeze(1)
            members = order[first[groups, None] + torch.arange(size, device=device)]
            mean[groups] = x[members].sum(dim=1) / size
    # A singleton keeps mean 0 and std 1 under verl's rule; otherwise it is dropped.
    keep = present & (count >= (1 if singleton == "raw" else 2))[inverse]
    centred = x - mean[inverse]
    if not norm_by_std:
        return torch.where(keep, centred, 0.0)
    squares = torch.where(keep, (x.double() - mean.double()[inverse]) ** 2, 0.0)
    total = torch.zeros(n_groups, dtype=torch.float64, device=device).index_add_(
        0, inverse, squares
    )
    std = torch.where(count >= 2, (total / (count - 1).clamp(min=1)).sqrt(), 1.0).float()
    return torch.where(keep, centred / (std[inverse] + eps), 0.0)


def onto(row_values: Tensor, mask: Tensor) -> Tensor:
    """Broadcast one value per rollout ``(B,)`` onto the tokens of ``mask (B, T)``."""
    # A product, not torch.where: several times faster on CPU for a broadcast row.
    return mask * row_values[:, None]


def rows_with_tokens(mask: Tensor) -> Tensor:
    """``(B, T)`` bool → ``(B,)``: does the row have any token in the mask."""
    if mask.shape[1] == 0:
        return torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device)
    # amax over a uint8 view is ~50x faster than Tensor.any(dim=1) on CPU.
    return mask.view(torch.uint8).amax(dim=1).bool()
