"""The reward layer's section (``train.rewards``, ``evaluate.rewards``): HierR and the
summary scorers. Torch-free."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from slca.config.base import StrictModel, registered
from slca.config.names import SUMMARY_SCORER_NAMES
from slca.config.vllm import VLLMConfig


class ProcessWeights(StrictModel):
    """Weights of the HierR process parts (each part lies in [0, 1])."""

    format: float = Field(0.10, ge=0)
    """Valid call blocks / call blocks."""
    name: float = Field(0.25, ge=0)
    """Multiset F1 of tool names against the gold calls."""
    key: float = Field(0.15, ge=0)
    """Mean argument-key Jaccard over gold calls (0 for an unmatched gold call)."""
    value: float = Field(0.20, ge=0)
    """Loosely equal argument values / gold keys."""
    parallel: float = Field(0.30, ge=0)
    """The first calling step has as many calls as the first gold step."""

    @model_validator(mode="after")
    def _sum_is_one(self) -> ProcessWeights:
        total = self.format + self.name + self.key + self.value + self.parallel
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"process weights must sum to 1 (R_tool lies in [0, 1]); got {total}")
        return self


class ExecutionWeights(StrictModel):
    """Weights of the gold-free ``execution`` mode's parts."""

    format: float = Field(0.2, ge=0)
    """Valid call blocks / call blocks."""
    success: float = Field(0.6, ge=0)
    """Executed calls whose response is not an error object / executed calls."""
    unique: float = Field(0.2, ge=0)
    """Executed calls that repeat no earlier call (same name, same canonical arguments)."""

    @model_validator(mode="after")
    def _sum_is_one(self) -> ExecutionWeights:
        total = self.format + self.success + self.unique
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"execution weights must sum to 1; got {total}")
        return self


class RedundancyConfig(StrictModel):
    """Penalties subtracted from R_tool for redundant behaviour (counts are always reported)."""

    per_call: float = Field(0.1, ge=0)
    """Per redundant call: a duplicate, a call to a tool no gold step uses, or any call
    on a no-call task."""
    per_extra_step: float = Field(0.1, ge=0)
    """Per calling turn beyond the gold number of steps (not counted on no-call tasks,
    where every call is already redundant)."""


class GuardConfig(StrictModel):
    """The omission guard (DESIGN §2)."""

    enabled: bool = True
    """Apply the guard at all."""
    penalty: float = -0.5
    """R_summary when the guard applies (overrides the summary scorer)."""
    on_negative_total: bool = True
    """Also apply it when R_tool before clipping (weighted parts minus the redundancy
    penalty) is negative."""


class GroundedConfig(StrictModel):
    """The deterministic ``grounded`` summary scorer."""

    response_values: Literal["fallback", "always"] = "fallback"
    """When the share of scalar values from successful tool responses stated in the
    summary counts: only for tasks that list no facts (``fallback``: a good answer
    states the facts, not every field of a list of flights), or always, mixed with
    the facts share by the weights below."""
    facts_weight: float = Field(0.7, ge=0)
    """With ``response_values: always``: weight of the share of the task's fact values."""
    responses_weight: float = Field(0.3, ge=0)
    """With ``response_values: always``: weight of the share of response values."""
    max_response_values: int = Field(32, ge=1)
    """At most this many scalar values (first in call order) are taken from responses."""
    max_value_chars: int = Field(64, ge=1)
    """Longer string values are not expected verbatim in a summary and are skipped."""
    unsupported_penalty: float = Field(0.1, ge=0)
    """Per number or entity in the summary found in no tool response, fact or prompt."""
    max_unsupported_penalty: float = Field(0.5, ge=0)
    """Cap of the total unsupported penalty."""
    min_words: int = Field(2, ge=0)
    """Summaries with fewer words get the length penalty."""
    max_words: int = Field(250, ge=1)
    """Summaries with more words get the length penalty."""
    length_penalty: float = Field(0.2, ge=0)
    """Subtracted when the summary's word count lies outside [min_words, max_words]."""
    max_chars: int = Field(20_000, ge=1)
    """Only this many leading characters of a summary are read (longer ones are out of
    length bounds anyway); bounds the cost of megabyte outputs."""

    @model_validator(mode="after")
    def _check(self) -> GroundedConfig:
        if self.facts_weight + self.responses_weight <= 0:
            raise ValueError("facts_weight + responses_weight must be > 0")
        if self.min_words > self.max_words:
            raise ValueError(f"min_words ({self.min_words}) > max_words ({self.max_words})")
        return self


class TruncationConfig(StrictModel):
    """Rollouts cut off by a length limit (``max_new_tokens``, ``max_total_tokens`` or
    ``max_turn_bytes``) before the policy ended its turn."""

    penalty: float = Field(0.0, ge=0)
    """The price of a truncated rollout, charged to the reward ``head`` names. 0 turns it
    off: a truncated rollout then scores like one that finished, so nothing rewards
    stopping."""
    head: Literal["summary", "tool", "cut"] = "summary"
    """``summary``: R_summary is ``-penalty``; its answer never ended, so the summary
    scorer is not asked (the omission guard's penalty stands where it applies), and
    R_tool is unchanged (the calls made before the cut still count; a call block cut
    open already costs format). ``tool``: R_tool is lowered by ``penalty`` (not below
    0) and R_summary is scored as for a finished rollout. ``cut``: the head of the turn
    the limit cut, ``summary`` when it was the answer turn (no call block), ``tool``
    when it was a call turn. Under segment-locked credit a rollout cut off in a call
    turn has no summary tokens, so a summary-side price lands on no token, and one cut
    off in its answer has run on in summary tokens, which a tool-side price would not
    reach (docs/results.md, credit lab)."""


class JudgeConfig(StrictModel):
    """The ``judge`` summary scorer: an LLM rates the answer 1-5. The trainer runs it on
    a model of its own (never the policy: see docs/decisions.md, "Trainer factory")."""

    model: str | None = None
    """The judge: a local HF checkpoint directory, a ``.gguf`` file or ``smollm2``;
    training requires it (a caller of ``score_batch`` may pass its own ``generate``
    instead). Loaded once, frozen."""
    engine: Literal["hf", "vllm"] = "hf"
    """transformers ``generate`` (``hf``; CPU or GPU) or a vLLM engine (CPU or CUDA; a
    checkpoint directory only), as the rollout engines are."""
    device: str | None = None
    """``hf``: where the judge runs; null: the policy's device."""
    batch_size: int = Field(8, ge=1)
    """``hf``: prompts per ``generate`` call."""
    max_new_tokens: int = Field(128, ge=1)
    """Tokens of one reply (a justification, then ``Rating: N``)."""
    temperature: float = Field(0.0, ge=0)
    """0: greedy, the same summary gets the same rating every time."""
    vllm: VLLMConfig = Field(default_factory=lambda: VLLMConfig(memory_share=0.2))
    """The vLLM engine when ``engine`` is ``vllm`` (0.2 of the device by default)."""

    failure_score: float = Field(0.5, ge=0, le=1)
    """Score of a summary whose rating cannot be parsed or whose generation failed
    (neutral by default), counted in ``judge/failures``."""
    max_summary_chars: int = Field(4000, ge=1)
    """The summary is cut to this many characters in the judge prompt."""
    max_context_chars: int = Field(4000, ge=1)
    """The tool results are cut to this many characters in the judge prompt."""


class RewardModelConfig(StrictModel):
    """The ``reward_model`` summary scorer: an HF sequence-classification checkpoint."""

    path: str | None = None
    """Local checkpoint directory (model and tokenizer); required when this scorer is used."""
    device: str = "cpu"
    """torch device the model runs on."""
    batch_size: int = Field(8, ge=1)
    """Summaries scored per forward pass."""
    max_length: int = Field(1024, ge=8)
    """Inputs are truncated to this many tokens."""
    label: int = Field(-1)
    """For a multi-label head: the index of the 'good' label (softmax probability);
    ignored by a one-logit head."""
    transform: Literal["sigmoid", "identity"] = "sigmoid"
    """Map of a one-logit head's output: sigmoid into [0, 1], or the raw logit."""


class MarkerConfig(StrictModel):
    """The ``marker`` summary scorer: a deterministic style check for controlled
    experiments (the credit lab), not a measure of summary quality."""

    text: str = Field("Here is what I found", min_length=1)
    """A summary that contains this text (case-sensitive) scores 1, any other 0. The
    default is the opener of the SFT reference summary
    (:func:`slca.rollout.gold.reference_summary`), which the poor summary lacks."""


class SummaryConfig(StrictModel):
    """Which R_summary scorer runs, and the settings of each."""

    name: str = "grounded"
    """Name in the summary-scorer registry: grounded, judge, reward_model or marker."""
    grounded: GroundedConfig = Field(default_factory=GroundedConfig)
    """Settings of ``grounded``."""
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    """Settings of ``judge``."""
    reward_model: RewardModelConfig = Field(default_factory=RewardModelConfig)
    """Settings of ``reward_model``."""
    marker: MarkerConfig = Field(default_factory=MarkerConfig)
    """Settings of ``marker``."""

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        return registered(name, sorted(SUMMARY_SCORER_NAMES), "summary scorer")

    @model_validator(mode="after")
    def _reward_model_has_path(self) -> SummaryConfig:
        if self.name == "reward_model" and not self.reward_model.path:
            raise ValueError("summary.reward_model.path is required when name is 'reward_model'")
        return self


class RewardConfig(StrictModel):
    """The reward layer: how R_tool and R_summary are computed and composed (HierR)."""

    mode: Literal["process", "execution", "reference"] = "process"
    """R_tool from gold calls (HierR ``process``), from simulator responses only
    (gold-free ``execution``), or as the authors' code computes it from gold calls
    (``reference``: the trajectory scored as one text, unknown tools invalid, no
    redundancy penalty; :mod:`slca.rewards.reference`). ``redundancy`` applies to
    ``process`` only; ``reference`` ignores it (counts are still reported)."""
    process: ProcessWeights = Field(default_factory=ProcessWeights)
    """Weights of the process parts."""
    execution: ExecutionWeights = Field(default_factory=ExecutionWeights)
    """Weights of the execution parts."""
    redundancy: RedundancyConfig = Field(default_factory=RedundancyConfig)
    """Redundancy penalties."""
    guard: GuardConfig = Field(default_factory=GuardConfig)
    """The omission guard."""
    truncation: TruncationConfig = Field(default_factory=TruncationConfig)
    """What a rollout cut off by a length limit gets."""
    summary: SummaryConfig = Field(default_factory=SummaryConfig)
    """The R_summary scorer."""
