"""The DeepSpeed update engine: ``deepspeed.initialize`` with a ZeRO-1/2/3 config (see
:mod:`slca.training.engines`); DeepSpeed is imported when an engine is built."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from slca.config.engine import EngineConfig, OptimConfig, load_deepspeed_json
from slca.training.engine_support import (
    CLIENT_STATE,
    ENGINE_STATE,
    check_outside_autocast,
    enable_gradient_checkpointing,
    lr_factor,
    publish,
    read_engine_state,
    rng_state,
    save_hf_weights,
    set_rng_state,
    staging_paths,
    write_json,
)


def deepspeed_config(config: EngineConfig) -> dict[str, Any]:
    """The DeepSpeed config dict: the repository's (or given) JSON plus the keys the
    engine owns. On DeepSpeed's CPU accelerator it selects ``torch.optim.AdamW``
    (``torch_adam``), so no DeepSpeed op is compiled."""
    ds = load_deepspeed_json(config.deepspeed_json_path, expected_stage=config.zero_stage)
    optim = config.optim
    ds.update(
        train_micro_batch_size_per_gpu=1,  # the caller batches; DeepSpeed only logs this
        gradient_accumulation_steps=1,  # the caller accumulates (``boundary=False``)
        gradient_clipping=optim.max_grad_norm,
        bf16={"enabled": config.resolved_bf16()},
        optimizer=_optimizer(optim),
    )
    if optim.name == "sgd":
        # DeepSpeed builds torch.optim.SGD from its name, and ZeRO asks to be told
        # that an optimizer outside its own list is meant
        ds["zero_allow_untested_optimizer"] = True
    return ds


def _optimizer(optim: OptimConfig) -> dict[str, Any]:
    if optim.name == "sgd":
        params = {"lr": optim.lr, "momentum": optim.momentum, "weight_decay": optim.weight_decay}
        return {"type": "SGD", "params": params}
    params = {
        "lr": optim.lr,
        "betas": list(optim.betas),
        "eps": optim.eps,
        "weight_decay": optim.weight_decay,
        "torch_adam": _on_cpu(),
    }
    return {"type": "AdamW", "params": params}


def _on_cpu() -> bool:
    """Whether DeepSpeed runs on its CPU accelerator (no GPU, or ``DS_ACCELERATOR=cpu``)."""
    from deepspeed.accelerator import get_accelerator

    return get_accelerator().device_name() == "cpu"


def _no_op_builds_on_cpu() -> None:
    """On CPU, DeepSpeed JIT-compiles a shared-memory collective op (minutes of g++)
    when it creates its comm backend; mark it unavailable so gloo does the work."""
    if _on_cpu():
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


_ARCH = re.compile(r"(\d+)\.(\d+)[a-z]*(\+PTX)?")


def arch_list_deepspeed_parses(value: str) -> str:
    """``TORCH_CUDA_ARCH_LIST`` without the arch-specific suffixes that torch accepts and
    DeepSpeed 0.19's JIT builder cannot parse (``"9.0a"`` → ``"9.0"``; ``+PTX`` kept);
    entries of another form are left as they are."""
    out: list[str] = []
    for entry in value.replace(" ", ";").split(";"):
        match = _ARCH.fullmatch(entry.strip())
        kept = f"{match[1]}.{match[2]}{match[3] or ''}" if match else entry.strip()
        if kept and kept not in out:
            out.append(kept)
    return ";".join(out)


@contextlib.contextmanager
def _arch_list_for_deepspeed():
    """While DeepSpeed JIT-builds its ops (FusedAdam, in ``deepspeed.initialize``): CUDA
    images for Hopper set ``TORCH_CUDA_ARCH_LIST=9.0a``, on which that build fails with
    ``int('0a')`` (seen on an H200). The variable is restored afterwards."""
    value = os.environ.get("TORCH_CUDA_ARCH_LIST")
    parsed = arch_list_deepspeed_parses(value) if value else value
    if parsed == value:
        yield
        return
    logging.getLogger(__name__).warning(
        "TORCH_CUDA_ARCH_LIST=%r: DeepSpeed's op builds read it as %r", value, parsed
    )
    os.environ["TORCH_CUDA_ARCH_LIST"] = parsed
    try:
        yield
    finally:
        os.environ["TORCH_CUDA_ARCH_LIST"] = value


class DeepSpeedEngine:
    """``deepspeed.initialize`` around ``model``; one instance per rank.

    The process group comes from the launcher's environment (see the module
    docstring); the scheduler is the same warm-up/cosine ``LambdaLR`` as
    :class:`TorchEngine`, stepped by DeepSpeed and saved in its checkpoint.
    """

    def __init__(self, model: nn.Module, config: EngineConfig) -> None:
        if config.engine != "deepspeed":
            raise ValueError(f"DeepSpeedEngine got engine {config.engine!r}")
        import deepspeed
        import torch.distributed as dist

        self.config = config
        _no_op_builds_on_cpu()
        if not dist.is_initialized():
            backend = "gloo" if _on_cpu() else None  # None: the accelerator's (NCCL)
            deepspeed.init_distributed(dist_backend=backend)
        if config.gradient_checkpointing:
            enable_gradient_checkpointing(model)
        factor = lr_factor(config.optim)
        with _arch_list_for_deepspeed():
            self._ds, self.optimizer, _, self.scheduler = deepspeed.initialize(
                model=model,
                model_parameters=[p for p in model.parameters() if p.requires_grad],
                config=deepspeed_config(config),
                lr_scheduler=lambda optimizer: LambdaLR(optimizer, factor),
            )
        self._dist = dist

    @property
    def model(self) -> nn.Module:
        return self._ds

    @property
    def module(self) -> nn.Module:
        return self._ds.module

    @property
    def device(self) -> torch.device:
        return torch.device(self._ds.device)

    @property
    def rank(self) -> int:
        return self._dist.get_rank()

    @property
    def world_size(self) -> int:
        return self._dist.get_world_size()

    @property
    def is_main_process(self) -> bool:
        return self._dist.get_rank() == 0

    @property
    def steps(self) -> int:
        """Optimizer steps applied (DeepSpeed counts the ones its overflow check skipped
        in ``global_steps`` too)."""
        return int(self._ds.global_steps) - int(self._ds.skipped_steps)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()  # DeepSpeed keeps bf16 weights itself

    def micro_batch(self, *, boundary: bool = True) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()  # the boundary goes to DeepSpeed in backward

    def backward(self, loss: Tensor, *, boundary: bool = True) -> None:
        check_outside_autocast(self.device)
        self._ds.set_gradient_accumulation_boundary(boundary)
        self._ds.backward(loss, scale_wrt_gas=False)

    def step(self) -> float:
        """DeepSpeed's overflow check (``bf16.check_grad_overflow``, on by default; always
        on for fp32 ZeRO) skips a step with non-finite gradients, drops them, and reports
        an infinite norm."""
        self._ds.set_gradient_accumulation_boundary(True)
        self._ds.step()
        norm = self._ds.get_global_grad_norm()
        return float("nan") if norm is None else float(norm)

    def zero_grad(self) -> None:
        self._ds.zero_grad()

    def train(self) -> None:
        self._ds.train()

    def eval(self) -> None:
        self._ds.eval()

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def state_dict_for_rollout(self) -> dict[str, Tensor]:
        """Full weights on every rank; under ZeRO-3 each parameter is gathered in turn
        and copied to CPU (tied names share one copy)."""
        module = self._ds.module
        if self.config.zero_stage != 3:
            return {name: t.detach() for name, t in module.state_dict().items()}
        import deepspeed

        params = dict(module.named_parameters(remove_duplicate=False))
        buffers = dict(module.named_buffers())
        out: dict[str, Tensor] = {}
        copies: dict[int, Tensor] = {}
        for name in module.state_dict():
            if name not in params:
                out[name] = buffers[name].detach()
                continue
            param = params[name]
            if id(param) not in copies:
                with deepspeed.zero.GatheredParameters([param]):
                    copies[id(param)] = param.detach().to("cpu", copy=True)
            out[name] = copies[id(param)]
        return out

    def save(
        self,
        directory: str | Path,
        client_state: Mapping[str, Any] | None = None,
        checksums: bool = True,
    ) -> Path:
        """Collective: every rank calls it. Rank 0 stages, publishes and exports HF."""
        target = Path(directory)
        staging, _ = staging_paths(target)
        rank = self._dist.get_rank()
        if rank == 0:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
        self._dist.barrier()
        self._ds.save_checkpoint(str(staging / "deepspeed"), tag="state")
        weights = self.state_dict_for_rollout() if self.config.zero_stage == 3 else None
        torch.save(rng_state(), staging / f"rng_state_rank{rank}.pt")
        if rank == 0:
            module = self._ds.module
            save_hf_weights(module, staging, weights or module.state_dict())
            write_json(staging / CLIENT_STATE, dict(client_state or {}))
            meta = {
                "engine": "deepspeed",
                "steps": self.steps,
                "zero_stage": self.config.zero_stage,
                "world_size": self._dist.get_world_size(),
            }
            write_json(staging / ENGINE_STATE, meta)
        self._dist.barrier()
        if rank == 0:
            publish(staging, target, checksums)
        self._dist.barrier()
        return target

    def load(self, directory: str | Path) -> dict[str, Any]:
        source = Path(directory)
        meta = read_engine_state(source, "deepspeed")
        if meta["world_size"] != self._dist.get_world_size():
            raise ValueError(
                f"checkpoint {source} was written by {meta['world_size']} ranks, "
                f"this run has {self._dist.get_world_size()}; DeepSpeed's "
                "zero_to_fp32.py (in deepspeed/) converts it"
            )
        path, _ = self._ds.load_checkpoint(str(source / "deepspeed"), tag="state")
        if path is None:
            raise FileNotFoundError(f"checkpoint {source}: DeepSpeed state missing")
        rank = self._dist.get_rank()
        set_rng_state(torch.load(source / f"rng_state_rank{rank}.pt", weights_only=True))
        return json.loads((source / CLIENT_STATE).read_text())
