"""What both update engines share: the learning-rate schedule, the out-of-memory
message, RNG states, checkpoint directories published atomically, HF weights, the
device and the process group."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from slca.config.engine import OptimConfig

ENGINE_STATE = "engine.json"
"""Written last inside a checkpoint: engine kind, optimizer steps, world size."""
CLIENT_STATE = "client_state.json"
"""The caller's JSON state (step, data cursor, ...) saved with the checkpoint."""
CHECKSUMS = "checksums.json"
"""sha256 of every other file of a checkpoint, written as it is published: a resume
verifies them, so a truncated or altered file is caught before it loads (or, worse,
loads)."""
MICRO_BATCH_SETTING = "train.update.micro_batch_size"
"""The config key an out-of-memory message points at."""


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


def fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def staging_paths(target: Path) -> tuple[Path, Path]:
    return target.parent / f".{target.name}.tmp", target.parent / f".{target.name}.old"


def file_checksums(root: Path) -> dict[str, str]:
    """Relative path → sha256 of every file under ``root`` but :data:`CHECKSUMS`."""
    import hashlib

    sums = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.relative_to(root).as_posix()
        if name == CHECKSUMS:
            continue
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        sums[name] = digest.hexdigest()
    return sums


def publish(staging: Path, target: Path, checksums: bool = True) -> None:
    """Record the checksums of a finished staging directory (unless ``checksums`` is
    off), then rename it to ``target`` (replacing an older one)."""
    if checksums:
        write_json(staging / CHECKSUMS, file_checksums(staging))
    fsync_tree(staging)
    _, old = staging_paths(target)
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


def check_outside_autocast(device: torch.device) -> None:
    """Refuse a backward pass under autocast on ``device``: PyTorch runs backward ops in
    the dtype their forward ops chose and does not recommend backward under autocast
    (its AMP notes); the forward goes in ``autocast()``, the backward after it. Activation
    checkpointing's recomputation re-enters the forward's autocast state by itself."""
    if torch.is_autocast_enabled(device.type):
        raise RuntimeError(
            f"backward called inside autocast on {device.type}: leave the engine's "
            "autocast() (the forward and the loss) before calling backward"
        )


def enable_gradient_checkpointing(model: nn.Module) -> None:
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


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def read_engine_state(directory: Path, engine: str) -> dict[str, Any]:
    try:
        meta = json.loads((directory / ENGINE_STATE).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{directory} is not a complete checkpoint") from None
    if meta.get("engine") != engine:
        raise ValueError(f"checkpoint {directory} was written by engine {meta.get('engine')!r}")
    return meta
