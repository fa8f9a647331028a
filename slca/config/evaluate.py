"""The ``evaluate`` section: which model, which held-out sets, how it generates and
how it is scored (:mod:`slca.eval.stages`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from slca.config.base import StrictModel, known_names, room_for_a_prompt
from slca.config.data import BFCL_CATEGORIES, BFCL_MULTI_TURN
from slca.config.engine import check_device_setting
from slca.config.rewards import RewardConfig
from slca.config.vllm import VLLMConfig

BFCL_SETS = (*BFCL_CATEGORIES, *BFCL_MULTI_TURN)
"""The BFCL categories evaluate can score."""


class InDomainSet(StrictModel):
    split: str = "test"
    """The held-out split (never trained on)."""
    sources: list[str] | None = Field(default_factory=lambda: ["synth"])
    """Only tasks of these sources; null keeps every source. The default, ``[synth]``,
    is what the tiny default trains on (``sft.sources``, ``train.sources``)."""
    max_tasks: int | None = Field(100, ge=1)
    """A seeded subset of this many tasks; null evaluates the whole split."""


class BfclSet(StrictModel):
    categories: list[str] = Field(default_factory=lambda: list(BFCL_SETS))
    """BFCL v4 categories: the single-turn ones (slca.eval.bfcl.CATEGORIES, from the
    prepared eval records) and ``multi_turn_base`` (read from bfcl-eval itself)."""
    max_per_category: int = Field(10, ge=0)
    """A seeded subset per category; 0 skips BFCL."""
    max_steps_per_turn: int = Field(8, ge=1)
    """multi_turn_base: policy turns per user turn before the task is cut off (BFCL's own
    harness force-quits after 20); a cut-off task scores ``force_terminated``."""

    @field_validator("categories")
    @classmethod
    def _known(cls, categories: list[str]) -> list[str]:
        return known_names(categories, BFCL_SETS, "BFCL categories")


class Tau2Set(StrictModel):
    domains: list[Literal["airline", "retail", "telecom"]] = Field(
        default_factory=lambda: ["airline", "retail", "telecom"]
    )
    """τ²-bench domains."""
    max_per_domain: int = Field(5, ge=0)
    """A seeded subset per domain; 0 skips τ²."""
    max_turns: int = Field(8, ge=1)
    """Policy turns per task (τ² tasks take several tool steps)."""


class EvaluateParams(StrictModel):
    """The ``evaluate`` section: greedy rollouts of one model on the held-out sets."""

    model_dir: str = "models/sft"
    """The model to evaluate (HF format)."""
    in_dir: str = "data/tasks"
    """Task data."""
    report_path: str = "reports/eval/sft.json"
    """The metrics (JSON); one line per task goes beside it (``<stem>.tasks.jsonl``)."""
    seed: int = 0
    """Draws the task subsets."""
    in_domain: InDomainSet = Field(default_factory=InDomainSet)
    """The in-domain set."""
    value_probe_tasks: int | None = Field(200, ge=0)
    """The teacher-forced value probe (:mod:`slca.eval.value_probe`, one forward pass per
    task): a seeded subset of this many synth tasks of the ``val`` split of ``in_dir``,
    reported as ``value_probe/value_accuracy``, ``first_token_accuracy``,
    ``later_token_accuracy`` and ``values`` (how many argument values were scored); null
    probes every synth val task, 0 skips the probe. A split without a synth task (or
    without a string argument value) gives no probe figure."""
    max_new_tokens: int = Field(96, ge=1)
    """Tokens per policy turn."""
    max_turns: int = Field(3, ge=1)
    """Policy turns per task."""
    max_total_tokens: int = Field(2048, ge=16)
    """Prompt + turns + tool responses; tasks whose prompt alone leaves no room for a
    turn are left out and counted (``<set>/too_long``)."""
    generation_batch_size: int = Field(32, ge=1)
    """Rollouts generated together."""
    engine: Literal["hf", "vllm"] = "hf"
    """Generation engine: transformers (``hf``) or vLLM (CPU or CUDA)."""
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)
    """The vLLM engine when ``engine`` is ``vllm``."""
    device: str | None = None
    """Where the model runs with the ``hf`` engine (``cpu``, ``cuda``, ``cuda:1``); null:
    the GPU when there is one, else the CPU."""
    bfcl: BfclSet = Field(default_factory=lambda: BfclSet())
    """BFCL v4 (official checker)."""
    tau2: Tau2Set = Field(default_factory=lambda: Tau2Set())
    """τ²-bench on its real environments."""
    rewards: RewardConfig = Field(default_factory=lambda: RewardConfig(mode="process"))
    """The scorer (process mode: against gold)."""

    @model_validator(mode="after")
    def _room_for_a_prompt(self) -> EvaluateParams:
        room_for_a_prompt(self.max_total_tokens, self.max_new_tokens)
        return self

    tracking_dir: str | None = "mlflow"
    """MLflow store the metrics go to; null logs nothing."""
    experiment: str = "slca"
    """MLflow experiment (of the training runs)."""
    run_name: str | None = None
    """Name of the new MLflow run when the model has no training run (e.g. the SFT
    model); default ``eval-<model_dir name>``."""
    system_metrics_s: float | None = Field(10.0, gt=0)
    """Seconds between two samples of CPU, memory (and GPU) use while the evaluation
    runs, logged with its results as MLflow system metrics (``system/*``); null: none
    (and none without ``tracking_dir``)."""

    @field_validator("device")
    @classmethod
    def _device_is_a_torch_device(cls, device: str | None) -> str | None:
        return check_device_setting(device)
