"""The ``train`` section: the RL cycle (rollout → score → advantages → update).

Every field is documented where it is defined; the docstrings become the pydantic
descriptions, so ``TrainConfig.model_json_schema()`` documents params.yaml.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from slca.config.algorithm import (
    REFERENCE_REWARDS,
    AdvantageConfig,
    AlgorithmConfig,
    apply_profile,
    explicit_fields,
)
from slca.config.base import StrictModel, room_for_a_prompt
from slca.config.engine import TrainEngineConfig
from slca.config.rewards import RewardConfig
from slca.config.simulator import SimulatorConfig
from slca.config.vllm import VLLMConfig


class RolloutConfig(StrictModel):
    """How rollouts are sampled each step."""

    tasks_per_step: int = Field(8, ge=1)
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
        room_for_a_prompt(self.max_total_tokens, self.max_new_tokens)
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
    ``evaluate`` scores the test split; logged as ``val/<metric>`` at the step. Step 0 is
    the starting policy, validated before the first update, so every arm's curve starts
    from the same point (the report's ``curve_learning.png``)."""

    every: int = Field(4, ge=0)
    """Steps between validations; step 0 (before any update) and the last step always
    validate. 0 turns validation off."""
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
    steps: int = Field(16, ge=1)
    """RL steps to run."""
    checkpoint_every: int = Field(5, ge=1)
    """Steps between checkpoints (the last step always checkpoints)."""
    histogram_every: int = Field(5, ge=1)
    """Steps between segment-advantage histograms and the gradient-cosine probe."""
    max_bad_steps: int = Field(3, ge=1)
    """Consecutive non-finite losses that stop the run (each one is skipped)."""
    verify_checkpoints: bool = True
    """Record a sha256 of every checkpoint file as it is saved (``checksums.json``) and
    check them on resume, setting aside a checkpoint that fails and falling back to the
    one before. ``false`` skips both (no hashing: a save of many gigabytes is faster),
    and a resume trusts a complete checkpoint until it fails to load; a truncated file
    is still caught then, a file altered in place (same size) is not."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """Segments, estimator and loss."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Sampling."""
    update: UpdateConfig = Field(default_factory=UpdateConfig)
    """Minibatching."""
    rewards: RewardConfig = Field(default_factory=RewardConfig)
    """HierR and the summary scorer."""
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    """Held-out validation at step 0 and every few steps (``every: 0`` turns it off)."""
    simulator: SimulatorConfig = Field(default_factory=SimulatorConfig)
    """The simulator rollouts (and validation) call tools in."""
    engine: TrainEngineConfig = Field(default_factory=TrainEngineConfig)
    """Update engine (torch or DeepSpeed) and optimizer (learning rate 1e-4 unless set)."""
    init_dir: str = "models/sft"
    """Checkpoint the policy (and the frozen reference) start from."""
    in_dir: str = "data/tasks"
    """Task data (the train split is used)."""
    sources: list[str] | None = Field(default_factory=lambda: ["synth"])
    """Train only on tasks from these sources (``synth``, ``nestful``, ...); null: all.
    The default, ``[synth]``, is ``sft.sources``'s."""
    out_dir: str = "models/rl/{estimator}"
    """Final policy, HF format. ``{estimator}`` and ``{run_name}`` are filled in when the
    config loads, so each run has its own directory; an existing output of another
    configuration is refused unless ``--overwrite`` is given."""
    checkpoint_dir: str = "checkpoints/rl/{estimator}"
    """Resumable checkpoints (``step_<k>``) and the identity of the run writing them
    (``run.json``); one run at a time (a lock). ``{estimator}`` and ``{run_name}`` are
    filled in when the config loads; ``{fingerprint}`` (the config fingerprint, which
    covers the init checkpoint's content, see :mod:`slca.training.identity`) when the
    run starts, giving every configuration and init model its own directory."""
    tracking_dir: str = "mlflow"
    """MLflow SQLite store and artifacts (``MLFLOW_TRACKING_URI`` overrides)."""
    experiment: str = "slca"
    """MLflow experiment name."""
    run_name: str | None = None
    """MLflow run name; default: the estimator's name."""
    system_metrics_s: float | None = Field(10.0, gt=0)
    """Seconds between two samples of CPU, memory (and GPU) use, logged into the run as
    MLflow system metrics (``system/*``) while it trains; null: none."""
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
            rewards = explicit_fields(data.get("rewards") or {})
            if isinstance(rewards, Mapping):
                data["rewards"] = apply_profile(dict(rewards), REFERENCE_REWARDS, "rewards")
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
