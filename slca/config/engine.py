"""The update engine's section (``train.engine``, ``sft.engine``): optimizer, schedule,
torch or DeepSpeed. Torch is imported only to check a device setting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from slca.config.base import StrictModel

DEEPSPEED_CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "deepspeed"
"""The ZeRO-1/2/3 DeepSpeed configs kept in the repository (``zero{stage}.json``)."""

ENGINE_OWNED_KEYS = (
    "optimizer",
    "scheduler",
    "gradient_clipping",
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "bf16",
    "fp16",
)
"""DeepSpeed config keys that the engine sets from :class:`EngineConfig`; a JSON file
that sets them would be a second source of truth, so it is rejected."""


class OptimConfig(StrictModel):
    name: Literal["adamw", "sgd"] = "adamw"
    """``adamw`` (``torch.optim.AdamW``), or ``sgd`` (``torch.optim.SGD``): a step
    proportional to the gradient. AdamW scales each parameter's step by its gradient's
    running RMS, which can hide how much signal an advantage carries (the two-head
    bandit, ``benchmarks/credit/bandit.py``); SGD does not."""
    lr: float = Field(1e-6, gt=0)
    """Peak learning rate (reached at the end of warm-up)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW's (β1, β2), each in [0, 1)."""
    eps: float = Field(1e-8, gt=0)
    """AdamW's ε, added to the denominator."""
    momentum: float = Field(0.0, ge=0, lt=1)
    """SGD's momentum (0: plain SGD); ``adamw`` refuses a non-zero one (β1 is its
    momentum)."""
    weight_decay: float = Field(0.0, ge=0)
    """Weight decay: decoupled for AdamW, L2 in the gradient for SGD."""
    warmup_steps: int = Field(0, ge=0)
    """Optimizer steps of linear warm-up: step k (1-based, k ≤ warmup) uses lr·k/warmup."""
    schedule: Literal["constant", "cosine"] = "constant"
    """After warm-up: hold ``lr`` (constant) or decay it to ``min_lr_ratio·lr`` (cosine)
    at ``total_steps``."""
    total_steps: int | None = Field(None, gt=0)
    """Total optimizer steps of the run; required by the cosine schedule."""
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    """Cosine only: the floor of the decay, as a fraction of ``lr``."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradients are clipped to this global L2 norm before each step."""

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"each beta must lie in [0, 1); got {betas}")
        return betas

    @model_validator(mode="after")
    def _momentum_is_sgd_only(self) -> OptimConfig:
        if self.name == "adamw" and self.momentum != 0.0:
            raise ValueError(
                f"momentum ({self.momentum}) applies to name 'sgd'; AdamW's momentum is betas[0]"
            )
        return self

    @model_validator(mode="after")
    def _schedule_is_complete(self) -> OptimConfig:
        if self.schedule == "cosine" and self.total_steps is None:
            raise ValueError("schedule 'cosine' needs total_steps")
        if self.total_steps is not None and self.warmup_steps > self.total_steps:
            raise ValueError(
                f"warmup_steps ({self.warmup_steps}) must not exceed total_steps "
                f"({self.total_steps})"
            )
        return self


class EngineConfig(StrictModel):
    engine: Literal["torch", "deepspeed"] = "torch"
    """``torch``: plain PyTorch, one process (CPU default). ``deepspeed``: ZeRO through
    ``deepspeed.initialize``, one process per GPU under the deepspeed/torchrun launcher."""
    zero_stage: Literal[1, 2, 3] = 1
    """DeepSpeed only: ZeRO stage (1 shards optimizer states, 2 also gradients, 3 also
    parameters)."""
    deepspeed_config: Path | None = None
    """DeepSpeed only: a DeepSpeed JSON config; default ``configs/deepspeed/zero{stage}.json``.
    Its ``zero_optimization.stage`` must equal ``zero_stage``, and it must not set the
    keys the engine owns (optimizer, scheduler, clipping, batch sizes, precision)."""
    bf16: bool | None = None
    """bf16 mixed precision: autocast (torch) or bf16 weights with fp32 master copies
    (DeepSpeed). ``null``: on when a CUDA device supports bf16, off on CPU."""
    device: str | None = None
    """torch only: where the policy, the frozen reference and the batches live (``cpu``,
    ``cuda``, ``cuda:1``). ``null``: this process's GPU (``cuda:$LOCAL_RANK``, set by the
    launcher) when CUDA is available, else the CPU. DeepSpeed places the model on its
    accelerator's device itself (``DS_ACCELERATOR``), so it must stay ``null`` there."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward (HF ``gradient_checkpointing_enable``): less
    memory, about a third more compute."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """Optimizer and learning-rate schedule."""

    @field_validator("device")
    @classmethod
    def _device_is_a_torch_device(cls, device: str | None) -> str | None:
        return check_device_setting(device)

    @model_validator(mode="after")
    def _deepspeed_config_is_usable(self) -> EngineConfig:
        if self.engine == "deepspeed" and self.device is not None:
            raise ValueError(
                "device applies to engine 'torch' only; DeepSpeed uses its accelerator's "
                "device (DS_ACCELERATOR, LOCAL_RANK): leave it null"
            )
        if self.engine == "torch":
            if self.deepspeed_config is not None:
                raise ValueError("deepspeed_config applies to engine 'deepspeed' only")
            if self.zero_stage != 1:
                raise ValueError("zero_stage applies to engine 'deepspeed' only")
            return self
        load_deepspeed_json(self.deepspeed_json_path, expected_stage=self.zero_stage)
        return self

    @property
    def deepspeed_json_path(self) -> Path:
        """The DeepSpeed JSON config in use (the repository's one for the stage by default)."""
        if self.deepspeed_config is not None:
            return self.deepspeed_config
        return DEEPSPEED_CONFIG_DIR / f"zero{self.zero_stage}.json"

    def resolved_bf16(self) -> bool:
        """``bf16`` with ``null`` resolved against the machine."""
        if self.bf16 is not None:
            return self.bf16
        import torch

        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


# Each stage's engine has its own learning-rate default, params.yaml's: as a field
# default of its own optimizer class (not a default_factory of the section), so that an
# ``engine`` or ``optim`` mapping that omits ``lr`` still gets the stage's rate.


class SFTOptimConfig(OptimConfig):
    """``sft.engine.optim``: :class:`OptimConfig` with SFT's learning rate."""

    lr: float = Field(2e-3, gt=0)
    """Peak learning rate (reached at the end of warm-up)."""


class SFTEngineConfig(EngineConfig):
    """``sft.engine``: :class:`EngineConfig` with SFT's optimizer defaults."""

    optim: SFTOptimConfig = Field(default_factory=SFTOptimConfig)
    """Optimizer and learning-rate schedule."""


class TrainOptimConfig(OptimConfig):
    """``train.engine.optim``: :class:`OptimConfig` with RL's learning rate."""

    lr: float = Field(1e-4, gt=0)
    """Peak learning rate (reached at the end of warm-up)."""


class TrainEngineConfig(EngineConfig):
    """``train.engine``: :class:`EngineConfig` with RL's optimizer defaults."""

    optim: TrainOptimConfig = Field(default_factory=TrainOptimConfig)
    """Optimizer and learning-rate schedule."""


def check_device_setting(device: str | None) -> str | None:
    """A ``device`` setting's value, checked: null, or a cpu/cuda torch device string.
    Whether that device exists is checked when it is used."""
    if device is None:
        return None
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise ValueError(f"{device!r} is not a torch device (cpu, cuda, cuda:1, ...)") from None
    if parsed.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}: slca runs on cpu or cuda devices")
    return device


def load_deepspeed_json(path: Path, *, expected_stage: int) -> dict[str, Any]:
    """Read and check a DeepSpeed JSON config; errors name the file and the key."""
    try:
        config = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"deepspeed_config: no such file {path}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"deepspeed_config {path}: not valid JSON ({err})") from None
    if not isinstance(config, dict):
        raise ValueError(f"deepspeed_config {path}: must be a JSON object")
    owned = sorted(set(config) & set(ENGINE_OWNED_KEYS))
    if owned:
        raise ValueError(
            f"deepspeed_config {path}: keys {owned} are set by the engine from "
            "train.engine (optim.*, bf16); remove them from the JSON"
        )
    stage = config.get("zero_optimization", {}).get("stage")
    if stage != expected_stage:
        raise ValueError(
            f"deepspeed_config {path}: zero_optimization.stage is {stage!r} "
            f"but zero_stage is {expected_stage}"
        )
    return config
