"""Update engines: what the trainer calls to apply gradients and keep checkpoints.

Two engines share one protocol, :class:`UpdateEngine`:

- :class:`TorchEngine`: plain PyTorch AdamW, in one process (the CPU default) or one per
  device with ``DistributedDataParallel``.
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
                with engine.micro_batch(boundary=last):  # autocast; DDP: no all-reduce yet
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
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from slca.training.config import EngineConfig, OptimConfig, load_deepspeed_json

ENGINE_STATE = "engine.json"
"""Written last inside a checkpoint: engine kind, optimizer steps, world size."""
CLIENT_STATE = "client_state.json"
"""The caller's JSON state (step, data cursor, ...) saved with the checkpoint."""
MICRO_BATCH_SETTING = "train.update.micro_batch_size"
"""The config key an out-of-memory message points at."""


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
        """Context for a forward pass without gradients (bf16 autocast when ``bf16`` is
        set and the weights are fp32)."""
        ...

    def micro_batch(self, *, boundary: bool = True) -> contextlib.AbstractContextManager[Any]:
        """Context for one micro-batch's forward and :meth:`backward`: :meth:`autocast`,
        and under DDP no gradient all-reduce unless ``boundary`` (the last micro-batch
        before :meth:`step`)."""
        ...

    def backward(self, loss: Tensor, *, boundary: bool = True) -> None:
        """Accumulate gradients of ``loss``; ``boundary=False`` on all but the last
        micro-batch before :meth:`step`."""
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

    def save(self, directory: str | Path, client_state: Mapping[str, Any] | None = None) -> Path:
        """Write a complete checkpoint to ``directory`` atomically (all ranks call it)."""
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


# --- shared pieces ---------------------------------------------------------------------


def lr_factor(optim: OptimConfig) -> Callable[[int], float]:
    """Multiplier of ``optim.lr`` at scheduler step ``s`` (0-based), for ``LambdaLR``."""
    warmup, total, floor = optim.warmup_steps, optim.total_steps, optim.min_lr_ratio

    def factor(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        if optim.schedule == "constant" or total is None:
            return 1.0
        progress = min(1.0, (s - warmup) / max(1, total - warmup))
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


@contextlib.contextmanager
def explain_oom(micro_batch_size: int | None = None) -> Iterator[None]:
    """Turn a CUDA out-of-memory error into one that names the setting to lower."""
    try:
        yield
    except torch.cuda.OutOfMemoryError as err:
        now = "" if micro_batch_size is None else f" (now {micro_batch_size})"
        said = str(err).splitlines()[0] if str(err) else repr(err)
        raise RuntimeError(
            f"GPU out of memory in the update step: lower `{MICRO_BATCH_SETTING}`{now}; "
            "or enable `train.engine.gradient_checkpointing`, or use a higher "
            f"`train.engine.zero_stage`. CUDA said: {said}"
        ) from err


def rng_state() -> dict[str, Any]:
    """python, numpy and torch (CPU and CUDA) RNG states, as tensors and plain values
    (loadable with ``torch.load(weights_only=True)``)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Inverse of :func:`rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["kind"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _staging_paths(target: Path) -> tuple[Path, Path]:
    return target.parent / f".{target.name}.tmp", target.parent / f".{target.name}.old"


def _publish(staging: Path, target: Path) -> None:
    """Rename a finished staging directory to ``target`` (replacing an older one)."""
    _fsync_tree(staging)
    _, old = _staging_paths(target)
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    os.replace(staging, target)
    fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    shutil.rmtree(old, ignore_errors=True)


def save_hf_weights(module: nn.Module, directory: Path, state_dict: dict[str, Tensor]) -> None:
    """HF ``save_pretrained`` (safetensors, config) or, for a plain module, one
    ``model.safetensors``."""
    if hasattr(module, "save_pretrained"):
        module.save_pretrained(directory, state_dict=state_dict)
    else:
        from safetensors.torch import save_model

        save_model(module, str(directory / "model.safetensors"))


def load_hf_weights(module: nn.Module, directory: Path) -> None:
    """Load every ``*.safetensors`` in ``directory`` into ``module`` in place (so an
    optimizer keeps its parameters); tied weights saved once are accepted."""
    from safetensors.torch import load_file

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"checkpoint {directory}: no *.safetensors weights")
    state: dict[str, Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    missing, unexpected = module.load_state_dict(state, strict=False)
    own = module.state_dict()
    loaded_storage = {own[name].data_ptr() for name in state if name in own}
    untied = [name for name in missing if own[name].data_ptr() not in loaded_storage]
    if untied or unexpected:
        raise ValueError(
            f"checkpoint {directory} does not match the model: missing {untied}, "
            f"unexpected {unexpected}"
        )


# --- plain torch -----------------------------------------------------------------------


def resolve_device(setting: str | None, *, key: str = "engine.device") -> torch.device:
    """The device a ``device`` setting names (``null``: this process's GPU, else the
    CPU); ``cuda`` without an index is the launcher's ``LOCAL_RANK``. An unusable
    device is an error naming ``key`` before any work."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if setting is None:
        return torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(setting)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"{key}={setting!r} but torch {torch.__version__} sees no CUDA device; "
                f"set {key} to cpu (or null: the GPU when there is one)"
            )
        if device.index is None:
            device = torch.device("cuda", local)
        if device.index >= torch.cuda.device_count():
            raise ValueError(
                f"{key}={setting!r}: this machine has {torch.cuda.device_count()} CUDA devices"
            )
    return device


def join_process_group(device: torch.device) -> tuple[int, int]:
    """``(rank, world_size)``; under a launcher (``WORLD_SIZE`` > 1) joins its process
    group first: NCCL for CUDA devices, gloo for the CPU."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size()


class TorchEngine:
    """Plain ``torch.optim.AdamW``; one process, or one per device under ``torchrun``
    (``DistributedDataParallel``; gloo on CPU, NCCL on GPU). The CPU default.

    The model moves to ``device`` (see :class:`~slca.training.config.EngineConfig`).
    ``bf16`` turns on ``torch.autocast`` for the forward (weights stay fp32; ``null``:
    on for a model on a bf16-capable GPU);
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
            else self._device.type == "cuda" and torch.cuda.is_bf16_supported()
        )
        if self.config.gradient_checkpointing:
            _enable_gradient_checkpointing(model)
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
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
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
        stack = contextlib.ExitStack()
        stack.enter_context(self.autocast())
        if not boundary and self._model is not self._module:  # DDP reads it at forward time
            stack.enter_context(self._model.no_sync())
        return stack

    def backward(self, loss: Tensor, *, boundary: bool = True) -> None:
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

    def save(self, directory: str | Path, client_state: Mapping[str, Any] | None = None) -> Path:
        """Every rank calls it; rank 0 writes the (replicated) weights and optimizer,
        each rank its RNG state."""
        target = Path(directory)
        staging, _ = _staging_paths(target)
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
                _write_json(staging / CLIENT_STATE, dict(client_state or {}))
                meta = {"engine": "torch", "steps": self.steps, "world_size": self._world_size}
                _write_json(staging / ENGINE_STATE, meta)
            self._barrier()
            if main:
                _publish(staging, target)
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
        meta = _read_engine_state(source, "torch")
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


# --- DeepSpeed -------------------------------------------------------------------------


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
        optimizer={
            "type": "AdamW",
            "params": {
                "lr": optim.lr,
                "betas": list(optim.betas),
                "eps": optim.eps,
                "weight_decay": optim.weight_decay,
                "torch_adam": _on_cpu(),
            },
        },
    )
    return ds


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
            _enable_gradient_checkpointing(model)
        factor = lr_factor(config.optim)
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

    def save(self, directory: str | Path, client_state: Mapping[str, Any] | None = None) -> Path:
        """Collective: every rank calls it. Rank 0 stages, publishes and exports HF."""
        target = Path(directory)
        staging, _ = _staging_paths(target)
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
            _write_json(staging / CLIENT_STATE, dict(client_state or {}))
            meta = {
                "engine": "deepspeed",
                "steps": self.steps,
                "zero_stage": self.config.zero_stage,
                "world_size": self._dist.get_world_size(),
            }
            _write_json(staging / ENGINE_STATE, meta)
        self._dist.barrier()
        if rank == 0:
            _publish(staging, target)
        self._dist.barrier()
        return target

    def load(self, directory: str | Path) -> dict[str, Any]:
        source = Path(directory)
        meta = _read_engine_state(source, "deepspeed")
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


# --- helpers ---------------------------------------------------------------------------


def _enable_gradient_checkpointing(model: nn.Module) -> None:
    """HF activation (a.k.a. gradient) checkpointing, non-reentrant, KV cache off."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        raise ValueError("gradient_checkpointing needs an HF model (gradient_checkpointing_enable)")
    if getattr(model, "config", None) is not None:
        model.config.use_cache = False


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def _read_engine_state(directory: Path, engine: str) -> dict[str, Any]:
    try:
        meta = json.loads((directory / ENGINE_STATE).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{directory} is not a complete checkpoint") from None
    if meta.get("engine") != engine:
        raise ValueError(f"checkpoint {directory} was written by engine {meta.get('engine')!r}")
    return meta
