"""The ``train.algorithm`` section: segments, advantage estimator, loss, and the
``reference`` profile that reproduces the authors' code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from slca.config.base import StrictModel, registered
from slca.config.names import (
    DEFAULT_ROUTING,
    ESTIMATOR_NAMES,
    TOOL,
    Aggregation,
    Numerics,
    SegmentMode,
    Singleton,
    validate_routing,
)


class SegmentConfig(StrictModel):
    mode: SegmentMode = "grammar"
    """How tokens reach reward heads. ``grammar`` (slca): each token's segment kind,
    read from the output grammar, through ``routing``. ``mask_runs`` (the authors'
    code): the last contiguous run of policy tokens is the summary head, every earlier
    run the tool head, whatever the tokens are (a rollout cut off after a call trains
    that call on the summary reward)."""
    routing: dict[str, str | None] = Field(default_factory=lambda: dict(DEFAULT_ROUTING))
    """Segment kind (reasoning, tool_call, preamble, summary) → reward head, or null
    to train on no token of that kind. ``grammar`` mode only."""

    @field_validator("routing")
    @classmethod
    def _known_kinds(cls, routing: dict[str, str | None]) -> dict[str, str | None]:
        return validate_routing(routing)

    @model_validator(mode="after")
    def _routing_applies(self) -> SegmentConfig:
        if self.mode == "mask_runs" and self.routing != DEFAULT_ROUTING:
            raise ValueError(
                "routing applies to mode 'grammar' only; mode 'mask_runs' routes runs, "
                "not kinds, to the tool and summary heads"
            )
        return self

    @property
    def heads(self) -> set[str]:
        return {head for head in self.routing.values() if head is not None}


class AdvantageConfig(StrictModel):
    estimator: str = "slca"
    """Name in the advantage registry: grpo, dr_grpo, slca, toolpo or rltr."""
    weights: dict[str, float] = Field(default_factory=lambda: {"tool": 1.0, "summary": 1.0})
    """Per-head weight: applied to rewards before normalising (grpo, dr_grpo, toolpo's
    outcome term) or to advantages after normalising (slca, rltr)."""
    norm_by_std: bool = True
    """Divide by the group std; False subtracts the group mean only."""
    eps: float = Field(1e-6, gt=0)
    """Added to the group std before dividing."""
    granularity: Literal["trajectory", "per_call"] = "trajectory"
    """slca only: one tool advantage per trajectory (the paper's estimator; the authors'
    code exactly is ``profile: reference``) or one per tool call."""
    numerics: Numerics = "float64"
    """``float64`` (slca): group statistics in float64, a group whose rewards are all
    equal gets exactly 0. ``float32`` (the authors' code): float32 arithmetic in torch's
    order and no zero-std branch, so a tied group gets its rounding noise over
    (std + eps), e.g. +0.056 on every member of 16 rewards of 0.85."""
    singleton: Singleton = "zero"
    """A group of one rollout in the whole-rollout z-score (grpo, dr_grpo, toolpo's
    outcome term): ``zero`` (slca: no comparison, no signal) or ``raw`` (verl's GRPO:
    mean 0 and std 1, so the advantage is the reward / (1 + eps)). Segment heads
    (slca, rltr) always give a lone present member 0, as the authors' code does."""
    weight_penalty: bool = True
    """grpo, dr_grpo, toolpo: the whole-rollout reward of a rollout the omission guard
    fired on is ``w_tool·0 + w_summary·penalty`` (true, slca) or the penalty as is
    (false, the authors' code, whatever the weights)."""

    def switches(self) -> dict[str, Any]:
        """The keyword arguments of :func:`slca.advantages.compute_advantages` that only
        the ``reference`` profile changes (numerics, singleton rule, penalty weighting)."""
        return {
            "numerics": self.numerics,
            "singleton": self.singleton,
            "weight_penalty": self.weight_penalty,
        }

    @field_validator("estimator")
    @classmethod
    def _registered(cls, name: str) -> str:
        return registered(name, sorted(ESTIMATOR_NAMES), "estimator")

    @field_validator("weights")
    @classmethod
    def _non_negative(cls, weights: dict[str, float]) -> dict[str, float]:
        negative = {head: w for head, w in weights.items() if w < 0}
        if negative:
            raise ValueError(f"weights must be >= 0; got {negative}")
        return weights

    @model_validator(mode="after")
    def _granularity_applies(self) -> AdvantageConfig:
        if self.granularity == "per_call" and self.estimator != "slca":
            raise ValueError(
                f"granularity 'per_call' needs estimator 'slca', not {self.estimator!r}"
            )
        return self


class LossConfig(StrictModel):
    clip_low: float = Field(0.2, ge=0, lt=1)
    """Lower clip: the ratio is kept above 1 - clip_low."""
    clip_high: float = Field(0.2, ge=0)
    """Upper clip: the ratio is kept below 1 + clip_high (raise it for DAPO's clip-higher)."""
    kl_coef: float = Field(0.001, ge=0)
    """Weight of the k3 KL to the frozen reference in the loss; 0 disables the reference."""
    aggregation: Aggregation = "token-mean"
    """How per-token losses become one: ``token-mean`` (every token of the minibatch
    weighs the same), ``seq-mean-token-mean`` (every rollout weighs the same: GRPO) or
    ``seq-mean-token-sum-norm`` (token sums over a constant, then the mean over rollouts:
    Dr. GRPO's length-unbiased form)."""
    norm_length: int | None = Field(None, ge=1)
    """``seq-mean-token-sum-norm`` only: the constant token count each rollout's sum is
    divided by; null: the rollout budget, ``rollout.max_new_tokens × rollout.max_turns``."""
    clip_ratio_c: float | None = Field(None, gt=1)
    """Dual clip (verl's ``clip_ratio_c``, Ye et al. 2020): a token with a negative
    advantage loses at most ``-A · clip_ratio_c``, however far its ratio has grown.
    null: off (slca's default); the reference profile uses 3."""


PROFILES: tuple[str, ...] = ("default", "reference")

REFERENCE_ESTIMATORS: tuple[str, ...] = ("grpo", "dr_grpo", "slca")
"""The estimators whose reference semantics the ``reference`` profile reproduces."""

REFERENCE_ALGORITHM: dict[tuple[str, str], tuple[Any, tuple[Any, ...] | None]] = {
    ("segments", "mode"): ("mask_runs", ("mask_runs",)),
    ("advantage", "numerics"): ("float32", ("float32",)),
    ("advantage", "singleton"): ("raw", ("raw",)),
    ("advantage", "weight_penalty"): (False, (False,)),
    ("advantage", "granularity"): ("trajectory", ("trajectory",)),
    ("loss", "clip_ratio_c"): (3.0, None),
}
"""What ``profile: reference`` sets under ``train.algorithm``: (section, key) →
(value when unset, the values it accepts when set; None: any but null)."""

REFERENCE_REWARDS: dict[tuple[str, ...], tuple[Any, tuple[Any, ...]]] = {
    ("mode",): ("reference", ("reference",)),
    ("guard", "enabled"): (True, (True,)),
}
"""What ``profile: reference`` sets under ``train.rewards``."""


def explicit_fields(value: Any) -> Any:
    """A model as the dict of the fields set on it (recursively); anything else as is."""
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    return value


def apply_profile(
    data: dict[str, Any], settings: Mapping[tuple[str, ...], tuple[Any, Any]], where: str
) -> dict[str, Any]:
    """``data`` with each profile setting filled in where unset; a set value the profile
    does not accept is an error naming the key and the allowed values."""
    data = {k: explicit_fields(v) for k, v in data.items()}
    for path, (value, allowed) in settings.items():
        *parents, leaf = path
        node = data
        for part in parents:
            child = explicit_fields(node.get(part))
            child = dict(child) if isinstance(child, Mapping) else {}
            node[part] = child
            node = child
        if leaf not in node:
            node[leaf] = value
            continue
        given = node[leaf]
        if (given is None) if allowed is None else (given not in allowed):
            what = "any value but null" if allowed is None else ", ".join(map(repr, allowed))
            raise ValueError(
                f"{'.'.join((where, *path))}: {'null' if given is None else repr(given)} "
                "contradicts profile 'reference' "
                f"(allowed: {what})"
            )
    return data


class AlgorithmConfig(StrictModel):
    """What turns rewards into a policy update: segments, advantages, loss."""

    profile: Literal["default", "reference"] = "default"
    """``default``: slca's design. ``reference``: reproduce the authors' SLCA-GRPO code
    (SLCA-GRPO/SLCA-GRPO @ 68539c5) output for output: mask-run segments, float32
    estimator numerics with verl's singleton rule and the unweighted guard penalty,
    verl's dual-clip loss (clip_ratio_c 3), and ``train.rewards.mode: reference``.
    Every setting it implies is filled in; one set to another value is refused.
    Estimators: grpo, dr_grpo, slca. See docs/decisions.md, "Reference profile"."""
    segments: SegmentConfig = Field(default_factory=SegmentConfig)
    """Which segment kinds route to which reward head."""
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig)
    """The estimator and its settings."""
    loss: LossConfig = Field(default_factory=LossConfig)
    """The clipped surrogate, KL term and aggregation."""

    @model_validator(mode="before")
    @classmethod
    def _profile_settings(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or data.get("profile") != "reference":
            return data
        return apply_profile(dict(data), REFERENCE_ALGORITHM, "algorithm")

    @model_validator(mode="after")
    def _profile_estimator(self) -> AlgorithmConfig:
        if self.profile == "reference" and self.advantage.estimator not in REFERENCE_ESTIMATORS:
            raise ValueError(
                f"algorithm.advantage.estimator: {self.advantage.estimator!r} contradicts "
                f"profile 'reference' (allowed: {', '.join(map(repr, REFERENCE_ESTIMATORS))})"
            )
        return self

    @model_validator(mode="after")
    def _heads_agree(self) -> AlgorithmConfig:
        heads = self.segments.heads
        unknown = sorted(set(self.advantage.weights) - heads)
        if unknown:
            raise ValueError(
                f"advantage.weights names head(s) {unknown} that segments.routing "
                f"never routes to; routed heads: {sorted(heads)}"
            )
        if (
            self.advantage.estimator in ("toolpo", "rltr")
            or self.advantage.granularity == "per_call"
        ):
            if TOOL not in heads:
                raise ValueError(
                    f"estimator {self.advantage.estimator!r} needs segments.routing "
                    f"to route some kind to the {TOOL!r} head"
                )
        return self
