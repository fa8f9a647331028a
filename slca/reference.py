"""Replay a case of the authors' code through slca's ``reference`` profile.

``replay(case)`` takes one line of a reference fixture file
(``tests/fixtures/reference/hierr.jsonl`` or ``advantages.jsonl``, format in that
directory's README) and returns slca's outputs under the fixture's own keys, so a
test (or a user with their own fixture set) compares them with the stored ones:

- a HierR case (it has ``solution_str``): ``{"expected": every numeric field,
  "expected_labels": the two string fields}``, from :func:`slca.rewards.reference.score_text`;
- an advantage case (it has ``estimator``): ``{"expected_advantages": B×T}``, plus
  ``expected_adv_process`` / ``expected_adv_summary`` (per row, λ applied) for
  ``slca``, from the registry's estimator with the reference profile's switches.

It is a thin adapter: the switches come from the resolved ``reference`` profile
(:func:`reference_config`, or any config passed in, to see what one switch changes),
the pieces are the ones training uses (:func:`slca.segments.head_masks`,
:func:`slca.rewards.reference.route_penalty`, :func:`slca.advantages.compute_advantages`);
only the fixture's per-case settings (λ, ε, norm flag) come from the case.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from slca.advantages import SUMMARY, TOOL, compute_advantages
from slca.config.algorithm import AlgorithmConfig
from slca.config.train import TrainConfig
from slca.rewards.reference import route_penalty, score_text
from slca.segments import ENV, KIND_CODE, head_masks

REPLAYED_ESTIMATORS = ("grpo", "slca")
"""The estimators of the authors' code that fixture cases name."""


@cache
def reference_config() -> TrainConfig:
    """The training config that ``profile: reference`` resolves to (defaults elsewhere)."""
    return TrainConfig(algorithm={"profile": "reference"})


def reference_algorithm() -> AlgorithmConfig:
    return reference_config().algorithm


def replay(case: dict[str, Any], *, config: TrainConfig | None = None) -> dict[str, Any]:
    """slca's outputs for one fixture case, under the fixture's keys (see the module doc).

    Args:
        case: one line of a fixture file, parsed.
        config: whose switches to replay with; default :func:`reference_config`. HierR
            cases read its process weights and guard penalty only.

    Raises:
        ValueError: the case is neither a HierR case nor an advantage case, or names an
            estimator the reference profile does not reproduce.
    """
    config = config or reference_config()
    if "solution_str" in case:
        return _replay_hierr(case, config)
    if "estimator" in case:
        return _replay_advantages(case, config.algorithm)
    raise ValueError(
        f"case {case.get('id', '?')!r}: neither a HierR case (solution_str) "
        "nor an advantage case (estimator)"
    )


def _replay_hierr(case: dict[str, Any], config: TrainConfig) -> dict[str, Any]:
    rewards = config.rewards
    result = score_text(
        case["solution_str"],
        case["allowed_tools"],
        case["gold"],
        weights=rewards.process,
        penalty=rewards.guard.penalty,
    )
    return {"expected": result.fields(), "expected_labels": result.label_fields()}


def _replay_advantages(case: dict[str, Any], algorithm: AlgorithmConfig) -> dict[str, Any]:
    name = case["estimator"]
    if name not in REPLAYED_ESTIMATORS:
        raise ValueError(
            f"case {case.get('id', '?')!r}: estimator {name!r} is not replayed "
            f"(replayed: {', '.join(REPLAYED_ESTIMATORS)})"
        )
    response_mask = torch.tensor(case["response_mask"], dtype=torch.float32)
    batch = response_mask.shape[0]
    if algorithm.segments.mode != "mask_runs":
        raise ValueError(
            "advantage cases carry a mask, no text: replay them with segments.mode "
            f"'mask_runs', not {algorithm.segments.mode!r}"
        )
    # The mask as the trainer holds it: policy tokens carry a kind (which one does not
    # matter to mask runs), the others ENV.
    kinds = torch.where(response_mask > 0.5, KIND_CODE["summary"], ENV)
    masks = head_masks(kinds, algorithm.segments.routing, mode="mask_runs")
    if name == "slca":
        routed = [
            route_penalty(p, s, total, flag > 0.5)
            for p, s, total, flag in zip(
                case["process_score"],
                case["summary_score"],
                case["score_total"],
                case["should_no_call"],
                strict=True,
            )
        ]
        rewards = {
            TOOL: torch.tensor([r[0] for r in routed], dtype=torch.float32),
            SUMMARY: torch.tensor([r[1] for r in routed], dtype=torch.float32),
        }
        weights = {TOOL: case["lambda_tool"], SUMMARY: case["lambda_sum"]}
        guarded = torch.tensor([r[2] for r in routed])
    else:
        # verl's GRPO reads one total per rollout (the case's ``scores``, λ and the
        # penalty already in it): put it on one head with unit weights.
        rewards = {
            TOOL: torch.zeros(batch, dtype=torch.float32),
            SUMMARY: torch.tensor(case["scores"], dtype=torch.float32),
        }
        weights = {TOOL: 1.0, SUMMARY: 1.0}
        guarded = None
    advantages, _ = compute_advantages(
        name,
        rewards=rewards,
        head_masks=masks,
        group_index=torch.tensor(case["group_index"], dtype=torch.long),
        weights=weights,
        norm_by_std=bool(case["norm_adv_by_std"]),
        eps=float(case["epsilon"]),
        guarded=guarded,
        **algorithm.advantage.switches(),
    )
    out: dict[str, Any] = {"expected_advantages": advantages.tolist()}
    if name == "slca":
        out["expected_adv_process"] = _row_values(advantages, masks[TOOL]).tolist()
        out["expected_adv_summary"] = _row_values(advantages, masks[SUMMARY]).tolist()
    return out


def _row_values(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B,)``: the advantage a row carries on ``mask`` (0 for a row without tokens there)."""
    if mask.shape[1] == 0:
        return torch.zeros(mask.shape[0])
    first = mask.to(torch.uint8).argmax(dim=1, keepdim=True)
    return torch.where(mask.any(dim=1), advantages.gather(1, first).squeeze(1), 0.0)
