"""The plain-PyTorch update engine: AdamW in one process, or one per device with
``DistributedDataParallel`` (see :mod:`slca.training.engines`)."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from slca import modeling
from slca.config.engine import EngineConfig
from slca.generation.device import resolve_device
from slca.training.engine_support import (
    CLIENT_STATE,
    ENGINE_STATE,
    check_outside_autocast,
    enable_gradient_checkpointing,
    join_process_group,
    load_hf_weights,
    lr_factor,
    publish,
    read_engine_state,
    rng_state,
    save_hf_weights,
    set_rng_state,
    staging_paths,
    write_json,
)


class TorchEngine:
    """Plain ``torch.optim.AdamW`` (or SGD, ``optim.name``); one process, or one per
    device under ``torchrun`` (``DistributedDataParallel``; gloo on CPU, NCCL on GPU).
    The CPU default.

    The model moves to ``device`` (see :class:`~slca.config.engine.EngineConfig`).
    ``bf16`` turns on ``torch.autocast`` for the forward (weights stay fp32; ``null``:
    on where :func:`slca.modeling.eval_dtype` is bf16, a bf16-capable GPU); backward runs
    outside it (see :meth:`micro_batch`);
    ``gradient_checkpointing`` calls the model's ``gradient_checkpointing_enable``.
    """

    def __init__(self, model: nn.Module, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        if self.config.engine != "torch":
            raise ValueError(f"TorchEngine got engine {self.config.engine!r}")
        self._device = resolve_device(self.config.device)
        self._rank, self._world_size = join_process_group(self._device)
        model.to(self._device)
        self._module = model
        self._bf16 = (
            self.config.bf16
            if self.config.bf16 is not None
            else modeling.eval_dtype(self._device) == torch.bfloat16  # the one rule
        )
        if self.config.gradient_checkpointing:
            enable_gradient_checkpointing(model)
        self._model: nn.Module = model
        if self._world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            # Buffers (rotary tables) are never trained: broadcasting them would make
            # every forward, gradient-free ones included, a collective.
            self._model = DistributedDataParallel(
                model,
                device_ids=[self._device.index] if self._device.type == "cuda" else None,
                broadcast_buffers=False,
            )
        optim = self.config.optim
        trained = [p for p in model.parameters() if p.requires_grad]
        if optim.name == "sgd":
            self.optimizer: torch.optim.Optimizer = torch.optim.SGD(
                trained, lr=optim.lr, momentum=optim.momentum, weight_decay=optim.weight_decay
            )
        else:
            self.optimizer = torch.optim.AdamW(
                trained,
                lr=optim.lr,
                betas=optim.betas,
                eps=optim.eps,
                weight_decay=optim.weight_decay,
            )
        self.scheduler = LambdaLR(self.optimizer, lr_factor(optim))
        self.steps = 0

    @property
    def model(self) -> nn.Module:
        return self._model

    @property
    def module(self) -> nn.Module:
        return self._module

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def is_main_process(self) -> bool:
        return self._rank == 0

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(
            device_type=self._device.type, dtype=torch.bfloat16, enabled=self._bf16
        )

    def micro_batch(self, *, boundary: bool = True) -> contextlib.AbstractContextManager[Any]:
        if not boundary and self._model is not self._module:  # DDP reads it at forward time
            return self._model.no_sync()
        return contextlib.nullcontext()

    def backward(self, loss: Tensor, *, boundary: bool = True) -> None:
        check_outside_autocast(self._device)
        loss.backward()

    def step(self) -> float:
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        norm = torch.nn.utils.clip_grad_norm_(params, self.config.optim.max_grad_norm)
        if torch.isfinite(norm):
            self.optimizer.step()
            self.scheduler.step()
            self.steps += 1
        # else: as DeepSpeed's overflow check does, apply nothing (the norm is global
        # under DDP, so every rank skips)
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def train(self) -> None:
        self._model.train()

    def eval(self) -> None:
        self._model.eval()

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def state_dict_for_rollout(self) -> dict[str, Tensor]:
        """Detached views of the live weights (no copy): push them, don't keep them."""
        return {name: t.detach() for name, t in self._module.state_dict().items()}

    def _barrier(self) -> None:
        if self._world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def save(
        self,
        directory: str | Path,
        client_state: Mapping[str, Any] | None = None,
        checksums: bool = True,
    ) -> Path:
        """Every rank calls it; rank 0 writes the (replicated) weights and optimizer,
        each rank its RNG state."""
        target = Path(directory)
        staging, _ = staging_paths(target)
        main = self.is_main_process
        try:
            if main:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(staging, ignore_errors=True)
                staging.mkdir()
            self._barrier()
            torch.save(rng_state(), staging / f"rng_state_rank{self._rank}.pt")
            if main:
                save_hf_weights(self._module, staging, self._module.state_dict())
                torch.save(self.optimizer.state_dict(), staging / "optimizer.pt")
                torch.save(self.scheduler.state_dict(), staging / "scheduler.pt")
                write_json(staging / CLIENT_STATE, dict(client_state or {}))
                meta = {"engine": "torch", "steps": self.steps, "world_size": self._world_size}
                write_json(staging / ENGINE_STATE, meta)
            self._barrier()
            if main:
                publish(staging, target, checksums)
        except BaseException:
            if main:
                shutil.rmtree(staging, ignore_errors=True)
            raise
        self._barrier()
        return target

    def load(self, directory: str | Path) -> dict[str, Any]:
        """Weights, optimizer and scheduler are replicated, so any world size may load
        them; a rank the checkpoint has no RNG state for takes rank 0's."""
        source = Path(directory)
        meta = read_engine_state(source, "torch")
        load_hf_weights(self._module, source)
        self.optimizer.load_state_dict(
            torch.load(source / "optimizer.pt", map_location="cpu", weights_only=True)
        )
        self.scheduler.load_state_dict(torch.load(source / "scheduler.pt", weights_only=True))
        rng = source / f"rng_state_rank{self._rank}.pt"
        if not rng.exists():
            rng = source / "rng_state_rank0.pt"
        set_rng_state(torch.load(rng, weights_only=True))
        self.steps = int(meta["steps"])
        return json.loads((source / CLIENT_STATE).read_text())
