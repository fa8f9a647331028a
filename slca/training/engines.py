"""Update engines: what the trainer calls to apply gradients and keep checkpoints.

Two engines share one protocol, :class:`UpdateEngine`:

- :class:`TorchEngine`: plain PyTorch AdamW (or SGD), in one process (the CPU default) or
  one per device with ``DistributedDataParallel``.
- :class:`DeepSpeedEngine`: ``deepspeed.initialize`` with a ZeRO-1/2/3 config from
  ``configs/deepspeed/``; bf16 on GPU. One process per GPU, started by DeepSpeed's or
  PyTorch's launcher (slca has no launcher of its own) around the train stage (not the
  ``slca`` command, whose Prefect flow would run once per rank)::

      # one node, 8 GPUs
      torchrun --standalone --nproc_per_node 8 -m slca.training.stages train
      deepspeed --num_gpus 8 --no_local_rank --module slca.training.stages train \\
          -S train.engine.engine=deepspeed -S train.engine.zero_stage=3
      # two nodes (hostfile lists "node1 slots=8" and "node2 slots=8")
      deepspeed --hostfile hostfile --master_addr node1 --master_port 29500 \\
          --no_local_rank --module slca.training.stages train -S ...
      torchrun --nnodes 2 --node_rank $NODE --nproc_per_node 8 \\
          --rdzv_backend c10d --rdzv_endpoint node1:29500 -m slca.training.stages train

  The launcher sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT``;
  the engine joins that process group (NCCL on GPU, gloo on CPU). Multi-node
  checkpoints need a directory every node sees (a shared file system).

The loop, for either engine::

    for micro_batches in minibatches:
        with explain_oom(micro_batch_size):
            for i, mb in enumerate(micro_batches):
                last = i == len(micro_batches) - 1
                with engine.micro_batch(boundary=last):  # DDP: no all-reduce yet
                    with engine.autocast():  # the forward and the loss, not the backward
                        loss = loss_fn(engine.model, mb.to(engine.device))
                    engine.backward(loss, boundary=last)
            grad_norm = engine.step()  # clip, optimizer, scheduler, zero grads; skipped if
                                       # the norm is not finite

Gradient accumulation is the caller's: it scales each micro-batch loss (e.g. token
sums over the minibatch's token count) and calls ``backward`` once per micro-batch,
``boundary=False`` on all but the last, then ``step`` once. The engines never rescale
a loss; both average gradients over data-parallel ranks (DDP, DeepSpeed), so a caller
that wants the same objective at any world size scales each rank's loss by the world
size over the global normaliser. Every rank must run the same number of micro-batches.

Data parallel: under ``torchrun``/``deepspeed`` (``WORLD_SIZE`` > 1) :class:`TorchEngine`
joins the process group (gloo on CPU, NCCL on GPU) and wraps the model in
``DistributedDataParallel``; :class:`DeepSpeedEngine` lets DeepSpeed do both.

Checkpoints (``save``/``load``) are directories written under a temporary name and
renamed into place, so after a crash (kill -9 included) a checkpoint directory is
either complete or absent. Each holds the model as HF safetensors
(``save_pretrained``: loadable by ``from_pretrained`` and vLLM), the optimizer and
scheduler states (DeepSpeed: its own ``save_checkpoint`` under ``deepspeed/``), the
python/numpy/torch RNG states of every rank, and the caller's ``client_state`` (JSON:
step, data cursor, run id) so the trainer's state lands in the same atomic write.

Here: the protocol and :func:`build_engine` (every name below is importable from this
module); :class:`TorchEngine` in ``torch_engine.py``, :class:`DeepSpeedEngine` and
:func:`deepspeed_config` in ``deepspeed_engine.py``, what both share (schedule, RNG,
atomic checkpoint directories, HF weights, device, process group) in
``engine_support.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from slca.config.engine import EngineConfig
from slca.training.deepspeed_engine import DeepSpeedEngine, deepspeed_config
from slca.training.engine_support import (
    CLIENT_STATE,
    ENGINE_STATE,
    MICRO_BATCH_SETTING,
    explain_oom,
    join_process_group,
    load_hf_weights,
    lr_factor,
    rng_state,
    save_hf_weights,
    set_rng_state,
)
from slca.training.torch_engine import TorchEngine

__all__ = [
    "CLIENT_STATE",
    "ENGINE_STATE",
    "MICRO_BATCH_SETTING",
    "DeepSpeedEngine",
    "TorchEngine",
    "UpdateEngine",
    "build_engine",
    "deepspeed_config",
    "explain_oom",
    "join_process_group",
    "load_hf_weights",
    "lr_factor",
    "rng_state",
    "save_hf_weights",
    "set_rng_state",
]


class UpdateEngine(Protocol):
    """What the trainer needs from an update engine (torch or DeepSpeed)."""

    @property
    def model(self) -> nn.Module:
        """The module to call forward on (DeepSpeed: its engine wrapping the model)."""
        ...

    @property
    def module(self) -> nn.Module:
        """The bare model (HF ``PreTrainedModel``), e.g. for its config or ``generate``."""
        ...

    @property
    def device(self) -> torch.device:
        """Where the module's parameters live; inputs (batches) go there."""
        ...

    @property
    def rank(self) -> int:
        """This process's data-parallel rank (0 in one process)."""
        ...

    @property
    def world_size(self) -> int:
        """Data-parallel processes (1 without a launcher)."""
        ...

    @property
    def is_main_process(self) -> bool:
        """True on the rank that writes logs and shared files (rank 0)."""
        ...

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Context for a training forward and its loss (bf16 autocast when ``bf16`` is set
        and the weights are fp32); never around :meth:`backward`. Measurements
        (evaluation, validation) use :func:`slca.modeling.eval_autocast` instead."""
        ...

    def micro_batch(self, *, boundary: bool = True) -> contextlib.AbstractContextManager[Any]:
        """Context for one micro-batch's forward and :meth:`backward`: under DDP no
        gradient all-reduce unless ``boundary`` (the last micro-batch before
        :meth:`step`). No autocast: the forward enters :meth:`autocast` inside it."""
        ...

    def backward(self, loss: Tensor, *, boundary: bool = True) -> None:
        """Accumulate gradients of ``loss``; ``boundary=False`` on all but the last
        micro-batch before :meth:`step`. Raises inside an autocast context (PyTorch
        advises against backward under autocast)."""
        ...

    def step(self) -> float:
        """Clip, step the optimizer and the scheduler, zero the gradients; returns the
        global gradient norm before clipping. A non-finite norm (NaN/inf gradients on any
        rank) applies nothing: the gradients are dropped, optimizer and scheduler stay."""
        ...

    def zero_grad(self) -> None: ...

    def train(self) -> None: ...

    def eval(self) -> None: ...

    def current_lr(self) -> float:
        """The learning rate the next :meth:`step` will use."""
        ...

    def save(
        self,
        directory: str | Path,
        client_state: Mapping[str, Any] | None = None,
        checksums: bool = True,
    ) -> Path:
        """Write a complete checkpoint to ``directory`` atomically (all ranks call it),
        with the sha256 of every file unless ``checksums`` is off."""
        ...

    def load(self, directory: str | Path) -> dict[str, Any]:
        """Restore model, optimizer, scheduler and RNG; returns the saved client state."""
        ...

    def state_dict_for_rollout(self) -> dict[str, Tensor]:
        """Full weights by HF name, for the rollout engine (gathered under ZeRO-3)."""
        ...


def build_engine(model: nn.Module, config: EngineConfig) -> UpdateEngine:
    """The engine ``config.engine`` names, wrapped around ``model``."""
    if config.engine == "deepspeed":
        return DeepSpeedEngine(model, config)
    return TorchEngine(model, config)
