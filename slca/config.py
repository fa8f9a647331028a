"""Typed configuration, validated when it is loaded (cross-field rules included).

Every field is documented where it is defined; the docstrings become the
pydantic descriptions, so ``Model.model_json_schema()`` documents params.yaml.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from slca.advantages import TOOL, available_estimators
from slca.losses import Aggregation
from slca.rewards.config import RewardConfig
from slca.segments import DEFAULT_ROUTING, validate_routing
from slca.training.config import EngineConfig


class StrictModel(BaseModel):
    """Unknown keys are errors (a typo must not silently fall back to a default)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class SegmentConfig(StrictModel):
    routing: dict[str, str | None] = Field(default_factory=lambda: dict(DEFAULT_ROUTING))
    """Segment kind (reasoning, tool_call, preamble, summary) → reward head, or null
    to train on no token of that kind."""

    @field_validator("routing")
    @classmethod
    def _known_kinds(cls, routing: dict[str, str | None]) -> dict[str, str | None]:
        return validate_routing(routing)

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
    """slca only: one tool advantage per trajectory (the paper) or one per tool call."""

    @field_validator("estimator")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in available_estimators():
            raise ValueError(
                f"unknown estimator {name!r}; valid: {', '.join(available_estimators())}"
            )
        return name

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


class AlgorithmConfig(StrictModel):
    """What turns rewards into a policy update: segments, advantages, loss."""

    segments: SegmentConfig = Field(default_factory=SegmentConfig)
    """Which segment kinds route to which reward head."""
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig)
    """The estimator and its settings."""
    loss: LossConfig = Field(default_factory=LossConfig)
    """The clipped surrogate, KL term and aggregation."""

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


class ConfigError(ValueError):
    """A config file failed validation; the message names the file, key and constraint."""


Model = TypeVar("Model", bound=BaseModel)


def read_params(path: str | Path, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The YAML document at ``path`` with dotted ``overrides`` applied
    (``{"train.steps": 4}``, as DVC's ``-S train.steps=4``)."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: expected a mapping of sections")
    document = copy.deepcopy(document)
    for key, value in (overrides or {}).items():
        *parents, leaf = key.split(".")
        node = document
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{path}: override {key!r}: {part!r} is not a mapping")
        node[leaf] = value
    return document


def parse_section(
    document: Mapping[str, Any], section: str, model: type[Model], path: str | Path
) -> Model:
    """Validate ``section`` (dotted names nest) of a params document into ``model``;
    a missing section gives the defaults; errors name the file, key and constraint."""
    data: Any = document
    for part in section.split("."):
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: {section}: expected a mapping at {part!r}")
        data = data.get(part) or {}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = [
            f"{path}: {'.'.join([section, *(str(p) for p in e['loc'])])}: {e['msg']}"
            for e in exc.errors()
        ]
        raise ConfigError("\n".join(lines)) from None


def load_section(
    path: str | Path, section: str, model: type[Model], overrides: Mapping[str, Any] | None = None
) -> Model:
    """``section`` of the params file at ``path`` (with ``overrides``) as ``model``."""
    return parse_section(read_params(path, overrides), section, model, path)


def parse_override(text: str) -> tuple[str, Any]:
    """``"train.steps=4"`` → ``("train.steps", 4)``; the value is read as YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {text!r}: expected key=value (e.g. train.steps=4)")
    return key.strip(), yaml.safe_load(value)


def add_override_option(parser: argparse.ArgumentParser, example: str) -> None:
    """The stage CLIs' repeatable ``-S/--set KEY=VALUE`` (read with :func:`overrides_of`)."""
    parser.add_argument(
        "-S",
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a param, as dvc exp run -S ({example}); repeatable",
    )


def overrides_of(args: argparse.Namespace) -> dict[str, Any]:
    """The ``-S`` overrides of parsed arguments, by dotted key."""
    return dict(parse_override(text) for text in args.set)


class RolloutConfig(StrictModel):
    """How rollouts are sampled each step."""

    tasks_per_step: int = Field(4, ge=1)
    """Prompts (groups) per step."""
    group_size: int = Field(4, ge=2)
    """Rollouts per prompt (G); group-relative advantages need at least 2."""
    max_new_tokens: int = Field(96, ge=1)
    """Tokens one policy turn may add."""
    max_turns: int = Field(3, ge=1)
    """Policy turns per rollout."""
    max_total_tokens: int = Field(2048, ge=16)
    """Prompt + turns + tool responses."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature (RL needs sampling: > 0)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass."""
    engine: Literal["hf", "vllm"] = "hf"
    """Generation engine: transformers (CPU/GPU) or vLLM (GPU)."""
    generation_batch_size: int = Field(32, ge=1)
    """Prompts per transformers ``generate`` call."""

    @model_validator(mode="after")
    def _room_for_a_prompt(self) -> RolloutConfig:
        if self.max_total_tokens <= self.max_new_tokens:
            raise ValueError(
                f"max_total_tokens ({self.max_total_tokens}) must exceed max_new_tokens "
                f"({self.max_new_tokens}): no task's prompt fits beside one turn"
            )
        return self


class UpdateConfig(StrictModel):
    """How the policy is updated from one step's rollouts."""

    epochs: int = Field(1, ge=1)
    """Passes over the step's rollouts (μ in the GRPO paper)."""
    minibatches: int = Field(1, ge=1)
    """Optimizer steps per epoch; the step's rollouts are split evenly."""
    micro_batch_size: int = Field(8, ge=1)
    """Rollouts per forward/backward; lower it when memory runs out."""
    recompute_old_logprobs: bool = True
    """Recompute the sampling policy's log-probs with the trained model (as verl does)
    instead of trusting the engine's (vLLM kernels differ slightly from training)."""


class ValidationConfig(StrictModel):
    """Held-out validation during training (verl's ``test_freq``, TRL's ``eval_steps``):
    one greedy rollout per task of a fixed seeded subset, scored against gold as
    ``evaluate`` scores the test split; logged as ``val/<metric>`` at the step."""

    every: int = Field(0, ge=0)
    """Steps between validations (the last step always validates); 0 turns it off."""
    split: str = "val"
    """The held-out split; never ``train``."""
    max_tasks: int = Field(32, ge=1)
    """Tasks drawn with the run's seed from the split (the same ones every time)."""

    @field_validator("split")
    @classmethod
    def _held_out(cls, split: str) -> str:
        if split == "train":
            raise ValueError("validation on the train split is not held out; use val or test")
        return split


class TrainConfig(StrictModel):
    """The RL cycle: rollout → score → advantages → update, ``steps`` times."""

    seed: int = 0
    """Seeds task order, sampling and minibatch shuffling."""
    estimator: str | None = None
    """Shorthand for ``algorithm.advantage.estimator`` (``dvc exp run -S
    train.estimator=grpo``); when both are given they must agree. After loading it
    always equals ``algorithm.advantage.estimator``."""
    baseline: str = "grpo"
    """The estimator trained alongside for comparison, from the same SFT checkpoint
    (DVC stage ``train@baseline``; ``train@method`` uses ``estimator``)."""
    steps: int = Field(20, ge=1)
    """RL steps to run."""
    checkpoint_every: int = Field(5, ge=1)
    """Steps between checkpoints (the last step always checkpoints)."""
    histogram_every: int = Field(5, ge=1)
    """Steps between segment-advantage histograms and the gradient-cosine probe."""
    max_bad_steps: int = Field(3, ge=1)
    """Consecutive non-finite losses that stop the run (each one is skipped)."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """Segments, estimator and loss."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Sampling."""
    update: UpdateConfig = Field(default_factory=UpdateConfig)
    """Minibatching."""
    rewards: RewardConfig = Field(default_factory=RewardConfig)
    """HierR and the summary scorer."""
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    """Held-out validation every few steps (off by default)."""
    engine: EngineConfig = Field(default_factory=lambda: EngineConfig(optim={"lr": 1e-5}))
    """Update engine (torch or DeepSpeed) and optimizer."""
    init_dir: str = "models/sft"
    """Checkpoint the policy (and the frozen reference) start from."""
    in_dir: str = "data/tasks"
    """Task data (the train split is used)."""
    sources: list[str] | None = None
    """Train only on tasks from these sources (``synth``, ``nestful``, ...); null: all."""
    out_dir: str = "models/rl"
    """Final policy, HF format."""
    checkpoint_dir: str = "checkpoints/rl"
    """Resumable checkpoints (``step_<k>``)."""
    tracking_dir: str = "mlflow"
    """MLflow SQLite store and artifacts (``MLFLOW_TRACKING_URI`` overrides)."""
    experiment: str = "slca"
    """MLflow experiment name."""
    run_name: str | None = None
    """MLflow run name; default: the estimator's name."""
    curve_path: str | None = None
    """If set, a CSV of the per-step learning curves (step, then
    :data:`slca.tracking.CURVE_METRICS`) written when the run ends, for ``dvc plots``."""

    @model_validator(mode="before")
    @classmethod
    def _estimator_shorthand(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        algorithm = data.get("algorithm") or {}
        if isinstance(algorithm, BaseModel):
            algorithm = algorithm.model_dump()
        advantage = dict(algorithm.get("advantage") or {})
        short, nested = data.get("estimator"), advantage.get("estimator")
        if short is not None:
            AdvantageConfig._registered(short)
        if short is not None and nested is not None and short != nested:
            raise ValueError(
                f"estimator={short!r} but algorithm.advantage.estimator={nested!r}; "
                "give one of them"
            )
        chosen = short or nested or AdvantageConfig().estimator
        data["estimator"] = chosen
        data["algorithm"] = {**algorithm, "advantage": {**advantage, "estimator": chosen}}
        return data

    @field_validator("baseline")
    @classmethod
    def _baseline_registered(cls, name: str) -> str:
        return AdvantageConfig._registered(name)

    @property
    def loss_norm_length(self) -> float:
        """The constant divisor of ``seq-mean-token-sum-norm`` (see LossConfig.norm_length)."""
        given = self.algorithm.loss.norm_length
        return float(given or self.rollout.max_new_tokens * self.rollout.max_turns)

    @model_validator(mode="after")
    def _batches_divide(self) -> TrainConfig:
        rollouts = self.rollout.tasks_per_step * self.rollout.group_size
        if rollouts % self.update.minibatches:
            raise ValueError(
                f"update.minibatches={self.update.minibatches} must divide the "
                f"{rollouts} rollouts of a step (tasks_per_step × group_size)"
            )
        return self
