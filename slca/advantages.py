"""Advantage estimators, registered by name (DESIGN §2).

Every estimator is a pure function of one :class:`AdvantageBatch` that z-scores
rewards inside groups of rollouts of the same prompt and writes the result onto the
tokens of reward heads::

    rewards      head → (B,)   float, one score per rollout and head
    head_masks   head → (B, T) bool, disjoint; union = trained policy tokens
    group_index  (B,)          int, which prompt each rollout belongs to

and returns ``advantages (B, T) float32``: exactly 0 outside the head masks, never NaN
or inf for finite inputs. The trainer calls :func:`compute_advantages` with a
configured name (or :func:`estimate_advantages` with a batch); the registry is the
only dispatch path, and it adds the metrics.

Three switches reproduce the authors' code (the ``reference`` profile) and are each
usable alone; their defaults are slca's design (docs/decisions.md, "Reference
profile"):

- ``numerics``: ``"float64"`` (statistics in float64, a constant group gets exactly
  0) or ``"float32"`` (the reference's float32 arithmetic in torch's order, no
  zero-std branch: a tied group gets its float32 rounding noise);
- ``singleton``: a group of one rollout in the whole-rollout z-score (``grpo``,
  ``dr_grpo``, ``toolpo``'s outcome term) gets ``"zero"`` or, as verl, ``"raw"``
  (mean 0, std 1: ``R / (1 + eps)``);
- ``weight_penalty``: the whole-rollout reward of a guarded rollout (``guarded``) is
  ``Σ w_h·R_h`` (True) or the penalty ``R_summary`` as is (False, the reference).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Protocol

import torch
from torch import Tensor

from slca.config.names import (
    ESTIMATOR_NAMES,
    NUMERICS,
    SINGLETONS,
    SUMMARY,
    TOOL,
    Numerics,
    Singleton,
)
from slca.group_stats import group_zscore, onto, rows_with_tokens
from slca.registry import Registry
from slca.segments import union_mask

__all__ = [
    "NUMERICS",
    "SINGLETONS",
    "SUMMARY",
    "TOOL",
    "AdvantageBatch",
    "Estimator",
    "Granularity",
    "Numerics",
    "Singleton",
    "available_estimators",
    "compute_advantages",
    "estimate_advantages",
    "get_estimator",
    "group_zscore",
    "metric_name",
    "register_advantage",
]


Granularity = Literal["trajectory", "per_call"]


@dataclass(frozen=True, eq=False)
class AdvantageBatch:
    """Everything an estimator reads for one step: the rollouts' rewards, masks and
    groups, and the options that shape the z-score. Checked when built (shapes, dtypes,
    disjoint masks, finite rewards, known options), so an estimator trusts it.

    Raises:
        ValueError: wrong shapes or dtypes, overlapping masks, non-finite rewards, an
            unknown option, or a ``guarded`` the penalty rule cannot apply.
    """

    rewards: Mapping[str, Tensor]
    """head → ``(B,)`` finite float scores. Every head of ``head_masks`` needs one;
    extra heads (e.g. a head routed to no tokens) still enter the combined reward of
    ``grpo``/``dr_grpo``/``toolpo``."""
    head_masks: Mapping[str, Tensor]
    """head → ``(B, T)`` bool, pairwise disjoint."""
    group_index: Tensor
    """``(B,)`` integer group id (prompt) of each rollout."""
    weights: Mapping[str, float] = field(default_factory=dict)
    """head → weight; a reward head without one gets 1.0. ``grpo`` weighs rewards
    before normalising; ``slca``/``rltr`` scale each head's advantage after normalising
    (before, a weight would cancel in the z-score)."""
    norm_by_std: bool = True
    """Divide by the group std (+``eps``); False subtracts the mean only."""
    eps: float = 1e-6
    """Added to the std."""
    granularity: Granularity = "trajectory"
    """``slca`` only: ``"per_call"`` gives each tool call its own advantage from
    ``call_rewards``; see :func:`slca`."""
    call_rewards: Tensor | None = None
    """``(B, K)`` float execution reward of call k of rollout i; NaN where the rollout
    made no k-th call. ``per_call`` only."""
    call_index: Tensor | None = None
    """``(B, T)`` int, the call (0..K-1) each tool-head token belongs to, -1 for tokens
    tied to no call. ``per_call`` only."""
    numerics: Numerics = "float64"
    """``"float64"`` or ``"float32"``; see :func:`group_zscore`."""
    singleton: Singleton = "zero"
    """``"zero"`` or ``"raw"``: a group of one rollout in the whole-rollout z-score of
    ``grpo``/``dr_grpo``/``toolpo``; see :func:`group_zscore`."""
    weight_penalty: bool = True
    """``grpo``/``dr_grpo``/``toolpo``: False takes a guarded rollout's
    ``rewards["summary"]`` (the penalty) as its whole reward, unweighted, as the
    reference does; True weighs it like any reward."""
    guarded: Tensor | None = None
    """``(B,)`` bool, the rollouts the omission guard fired on; None: none."""

    def __post_init__(self) -> None:
        _check_inputs(self.rewards, self.head_masks, self.group_index)
        _check_options(self)
        weights = {head: 1.0 for head in self.rewards}
        weights.update({head: float(w) for head, w in self.weights.items()})
        # Read-only views: an estimator cannot change what the next one reads.
        for name, value in (
            ("rewards", dict(self.rewards)),
            ("head_masks", dict(self.head_masks)),
            ("weights", weights),
        ):
            object.__setattr__(self, name, MappingProxyType(value))


class Estimator(Protocol):
    def __call__(self, batch: AdvantageBatch, /) -> Tensor: ...


_REGISTRY: Registry[Estimator] = Registry("advantage estimator", names=ESTIMATOR_NAMES)


def register_advantage(name: str) -> Callable[[Estimator], Estimator]:
    """Register an estimator ``(batch: AdvantageBatch) → (B, T)`` under ``name``; a
    second registration of a name is an error."""
    return _REGISTRY.register(name)


def available_estimators() -> list[str]:
    return _REGISTRY.names()


def get_estimator(name: str) -> Estimator:
    return _REGISTRY.get(name)


def compute_advantages(
    name: str,
    *,
    rewards: Mapping[str, Tensor],
    head_masks: Mapping[str, Tensor],
    group_index: Tensor,
    weights: Mapping[str, float] | None = None,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    granularity: Granularity = "trajectory",
    call_rewards: Tensor | None = None,
    call_index: Tensor | None = None,
    numerics: Numerics = "float64",
    singleton: Singleton = "zero",
    weight_penalty: bool = True,
    guarded: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Advantages ``(B, T)`` from the estimator registered as ``name``, plus metrics:
    :func:`estimate_advantages` of the :class:`AdvantageBatch` whose fields are the
    keyword arguments (documented there)."""
    get_estimator(name)  # an unknown name is the first error, whatever the inputs
    batch = AdvantageBatch(
        rewards=rewards,
        head_masks=head_masks,
        group_index=group_index,
        weights=weights or {},
        norm_by_std=norm_by_std,
        eps=eps,
        granularity=granularity,
        call_rewards=call_rewards,
        call_index=call_index,
        numerics=numerics,
        singleton=singleton,
        weight_penalty=weight_penalty,
        guarded=guarded,
    )
    return estimate_advantages(name, batch)


def estimate_advantages(name: str, batch: AdvantageBatch) -> tuple[Tensor, dict[str, Tensor]]:
    """Advantages ``(B, T)`` from the estimator registered as ``name``, plus metrics.

    Returns:
        ``(advantages, metrics)``: float32 ``(B, T)``, and 0-dim tensors keyed
        ``adv/<head>_mean``, ``adv/<head>_std`` (``summary`` shortened to ``sum``)
        and ``adv/zero_group_frac`` (share of groups whose every advantage is 0).

    Raises:
        ValueError: unknown name, or per-call inputs where they do not apply.
    """
    estimator = get_estimator(name)
    if batch.granularity == "per_call" and name != "slca":
        raise ValueError(f"granularity='per_call' is defined for 'slca' only, not {name!r}")
    advantages = estimator(batch)
    return advantages, _metrics(advantages, batch.head_masks, batch.group_index)


def _combined_reward(
    rewards: Mapping[str, Tensor],
    weights: Mapping[str, float],
    weight_penalty: bool = True,
    guarded: Tensor | None = None,
) -> Tensor:
    """``Σ_h w_h·R_h`` per rollout (float64); with ``weight_penalty=False`` a guarded
    rollout's reward is its summary reward (the penalty) as is."""
    total = sum(weights[head] * r.double() for head, r in rewards.items())
    if weight_penalty or guarded is None:
        return total
    return torch.where(guarded, rewards[SUMMARY].double(), total)


def _require_tool_head(name: str, head_masks: Mapping[str, Tensor]) -> Tensor:
    if TOOL not in head_masks:
        raise ValueError(f"estimator {name!r} needs a {TOOL!r} head; got {sorted(head_masks)}")
    return head_masks[TOOL]


def _present_zscore(
    b: AdvantageBatch, scores: Tensor, present: Tensor, group_index: Tensor | None = None
) -> Tensor:
    """:func:`group_zscore` of a segment's reward over the rows that have the segment,
    with the batch's options (a lone present member gets 0)."""
    return group_zscore(
        scores,
        b.group_index if group_index is None else group_index,
        present,
        norm_by_std=b.norm_by_std,
        eps=b.eps,
        numerics=b.numerics,
    )


def _outcome(b: AdvantageBatch, norm_by_std: bool) -> Tensor:
    """GRPO's advantage: the combined reward z-scored over every group member, on every
    head token. ``(B, T)``."""
    a = group_zscore(
        _combined_reward(b.rewards, b.weights, b.weight_penalty, b.guarded),
        b.group_index,
        norm_by_std=norm_by_std,
        eps=b.eps,
        numerics=b.numerics,
        singleton=b.singleton,
    )
    return onto(a, union_mask(b.head_masks))


@register_advantage("grpo")
def grpo(b: AdvantageBatch) -> Tensor:
    """GRPO: one scalar per rollout, ``R = Σ_h w_h·R_h`` (a guarded rollout's penalty
    as is with ``weight_penalty=False``) z-scored in its group (all members), broadcast
    to every head token. ``(B,)`` rewards → ``(B, T)``."""
    return _outcome(b, b.norm_by_std)


@register_advantage("dr_grpo")
def dr_grpo(b: AdvantageBatch) -> Tensor:
    """Dr.GRPO: GRPO without the std division (``norm_by_std`` is always False)."""
    return _outcome(b, norm_by_std=False)


@register_advantage("slca")
def slca(b: AdvantageBatch) -> Tensor:
    """SLCA: per head h, ``Â_h = w_h · z(R_h)`` over the group members in which
    head h has at least one token, written on ``head_masks[h]`` only.
    ``(B,)`` rewards per head → ``(B, T)``.

    ``granularity="per_call"``: tool-head tokens with ``call_index == k`` get
    ``w_tool · z(call_rewards[:, k])``, z-scored over the group members that made
    a k-th call (same present-only rule and fewer-than-2 guard); tool-head tokens
    with ``call_index == -1`` keep the trajectory-level tool advantage.
    """
    advantages = None
    for head, mask in b.head_masks.items():
        a = b.weights[head] * _present_zscore(b, b.rewards[head], rows_with_tokens(mask))
        if head == TOOL and b.granularity == "per_call":
            head_adv = torch.where(mask, _per_call_values(b, a), 0.0)
        else:
            head_adv = onto(a, mask)
        advantages = head_adv if advantages is None else advantages + head_adv
    return advantages


def _per_call_values(b: AdvantageBatch, trajectory_adv: Tensor) -> Tensor:
    """``(B, T)`` per-call tool advantages (trajectory value where ``call_index`` is -1)."""
    tool_mask, call_rewards, call_index = b.head_masks[TOOL], b.call_rewards, b.call_index
    if call_rewards is None or call_index is None:
        raise ValueError("granularity='per_call' needs call_rewards (B, K) and call_index (B, T)")
    batch, n_calls = call_rewards.shape if call_rewards.dim() == 2 else (-1, -1)
    if batch != tool_mask.shape[0] or call_index.shape != tool_mask.shape:
        raise ValueError(
            f"call_rewards must be (B, K) and call_index (B, T) with (B, T) = "
            f"{tuple(tool_mask.shape)}; got {tuple(call_rewards.shape)} and "
            f"{tuple(call_index.shape)}"
        )
    if call_index.dtype.is_floating_point or call_index.dtype == torch.bool:
        raise ValueError(f"call_index must be an integer tensor, got {call_index.dtype}")
    on_tool = torch.where(tool_mask, call_index.long(), -1)
    if on_tool.numel() and (on_tool.min() < -1 or on_tool.max() >= n_calls):
        raise ValueError(
            f"call_index on tool tokens must lie in [-1, {n_calls}); "
            f"got [{int(on_tool.min())}, {int(on_tool.max())}]"
        )
    has_tokens = torch.zeros(batch, n_calls + 1, dtype=torch.bool, device=tool_mask.device)
    has_tokens.scatter_(1, on_tool + 1, True)
    has_tokens = has_tokens[:, 1:]
    finite = torch.isfinite(call_rewards)
    if (has_tokens & ~finite).any():
        i, k = (has_tokens & ~finite).nonzero()[0].tolist()
        raise ValueError(
            f"call_rewards[{i}, {k}] is not finite but rollout {i} has tokens for call {k}"
        )
    # Group key (prompt, call index): the k-th calls of a group are compared together.
    groups = b.group_index.long()
    key = groups[:, None] * n_calls + torch.arange(n_calls, device=groups.device)
    per_call = b.weights[TOOL] * _present_zscore(
        b, call_rewards.reshape(-1), has_tokens.reshape(-1), key.reshape(-1)
    )
    token_values = per_call.view(batch, n_calls).gather(1, on_tool.clamp(min=0))
    return torch.where(on_tool >= 0, token_values, trajectory_adv[:, None])


@register_advantage("toolpo")
def toolpo(b: AdvantageBatch) -> Tensor:
    """ToolPO (DeepAgent, arXiv 2510.21618): the GRPO advantage of the combined
    reward on every head token, plus the present-only z-score of ``R_tool``
    (unweighted, as in the paper's sum) on tool tokens. ``(B,)`` → ``(B, T)``."""
    tool_mask = _require_tool_head("toolpo", b.head_masks)
    action = _present_zscore(b, b.rewards[TOOL], rows_with_tokens(tool_mask))
    return _outcome(b, b.norm_by_std) + onto(action, tool_mask)


@register_advantage("rltr")
def rltr(b: AdvantageBatch) -> Tensor:
    """RLTR (arXiv 2508.19598), planner-only credit: ``w_tool · z(R_tool)``
    (present-only) on tool tokens, 0 on every other token. ``(B,)`` → ``(B, T)``."""
    tool_mask = _require_tool_head("rltr", b.head_masks)
    a = b.weights[TOOL] * _present_zscore(b, b.rewards[TOOL], rows_with_tokens(tool_mask))
    return onto(a, tool_mask)


def _check_options(b: AdvantageBatch) -> None:
    if b.granularity not in ("trajectory", "per_call"):
        raise ValueError(f"granularity must be 'trajectory' or 'per_call', got {b.granularity!r}")
    if b.numerics not in NUMERICS:
        raise ValueError(f"numerics must be one of {list(NUMERICS)}, got {b.numerics!r}")
    if b.singleton not in SINGLETONS:
        raise ValueError(f"singleton must be one of {list(SINGLETONS)}, got {b.singleton!r}")
    guarded, batch = b.guarded, b.group_index.shape[0]
    if guarded is not None and (guarded.dtype != torch.bool or guarded.shape != (batch,)):
        raise ValueError(
            f"guarded must be a bool tensor (B,) = ({batch},); "
            f"got {guarded.dtype} {tuple(guarded.shape)}"
        )
    if not b.weight_penalty and guarded is not None and SUMMARY not in b.rewards:
        raise ValueError(f"weight_penalty=False reads the penalty from rewards[{SUMMARY!r}]")


def _check_inputs(
    rewards: Mapping[str, Tensor], head_masks: Mapping[str, Tensor], group_index: Tensor
) -> None:
    if not head_masks:
        raise ValueError("head_masks is empty: no tokens to write advantages on")
    shape = None
    for head, mask in head_masks.items():
        if mask.dtype != torch.bool or mask.dim() != 2:
            raise ValueError(
                f"head_masks[{head!r}] must be a 2-D bool tensor (B, T); "
                f"got {mask.dtype} {tuple(mask.shape)}"
            )
        if shape is not None and mask.shape != shape:
            raise ValueError(
                f"head_masks[{head!r}] has shape {tuple(mask.shape)}, others {tuple(shape)}"
            )
        shape = mask.shape
    batch = shape[0]
    if group_index.dim() != 1 or group_index.shape[0] != batch:
        raise ValueError(f"group_index must be (B,) = ({batch},); got {tuple(group_index.shape)}")
    if group_index.dtype.is_floating_point or group_index.dtype == torch.bool:
        raise ValueError(f"group_index must be an integer tensor, got {group_index.dtype}")
    missing = [head for head in head_masks if head not in rewards]
    if missing:
        raise ValueError(f"no reward for head(s) {missing}; rewards has {sorted(rewards)}")
    for head, r in rewards.items():
        if r.dim() != 1 or r.shape[0] != batch or not r.dtype.is_floating_point:
            raise ValueError(
                f"rewards[{head!r}] must be a float tensor (B,) = ({batch},); "
                f"got {r.dtype} {tuple(r.shape)}"
            )
        if not torch.isfinite(r).all():
            bad = (~torch.isfinite(r)).nonzero()[0].item()
            raise ValueError(f"rewards[{head!r}][{bad}] is {r[bad].item()}: rewards must be finite")
    heads = list(head_masks)
    for i, a in enumerate(heads):
        for b in heads[i + 1 :]:
            if (head_masks[a] & head_masks[b]).any():
                raise ValueError(
                    f"head_masks[{a!r}] and head_masks[{b!r}] overlap; a token belongs to one head"
                )


def metric_name(head: str) -> str:
    """A head's name in metric keys (``adv/<name>_mean``, ``segment/<name>_…``):
    ``summary`` is ``sum``, as DESIGN §8 spells it."""
    return "sum" if head == SUMMARY else head


def _metrics(
    advantages: Tensor, head_masks: Mapping[str, Tensor], group_index: Tensor
) -> dict[str, Tensor]:
    metrics: dict[str, Tensor] = {}
    for head, mask in head_masks.items():
        values = advantages[mask]
        name = metric_name(head)
        if values.numel():
            metrics[f"adv/{name}_mean"] = values.mean()
            metrics[f"adv/{name}_std"] = values.std(correction=0)
        else:
            metrics[f"adv/{name}_mean"] = metrics[f"adv/{name}_std"] = advantages.new_zeros(())
    signal = (
        advantages.abs().amax(dim=1) > 0
        if advantages.shape[1]
        else torch.zeros(advantages.shape[0], dtype=torch.bool, device=advantages.device)
    )
    _, inverse = torch.unique(group_index, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    signal_rows = torch.zeros(n_groups, device=advantages.device).index_add_(
        0, inverse, signal.float()
    )
    metrics["adv/zero_group_frac"] = (
        (signal_rows == 0).float().mean() if n_groups else advantages.new_zeros(())
    )
    return metrics
