"""The settings of one vLLM engine, torch-free so that any configuration section (the
reward layer's judge, the simulator's ``llm`` backend) can hold them without torch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from slca.config.base import StrictModel


class VLLMConfig(StrictModel):
    """One vLLM engine: precision, memory, parallelism. Used by ``train.rollout.vllm``,
    ``evaluate.vllm``, the simulator's ``llm`` backend and the judge."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights and activations. ``auto``: bfloat16 on CUDA; float32 on CPU, the
    trainer's precision there, so sampled log-probs match its recomputation."""
    memory_share: float = Field(0.4, gt=0, lt=1)
    """Share of the device's memory this engine reserves at start-up (vLLM's
    ``gpu_memory_utilization``): weights, activations and KV cache. The policy's
    engine (0.4) and the simulator's (0.2) leave 0.4 of a GPU to the update. On CPU
    it is a share of the RAM, used only when ``kv_cache_gib`` is null."""
    kv_cache_gib: float | None = Field(None, gt=0)
    """KV-cache size in GiB. null: what ``memory_share`` leaves on CUDA, 1 GiB on CPU
    (vLLM-CPU would otherwise reserve ``memory_share`` of the RAM)."""
    tensor_parallel_size: int = Field(1, ge=1)
    """GPUs one engine shards the model over (CUDA only)."""
    enforce_eager: bool | None = None
    """No compiled graphs. null: eager on CPU (torch.compile's warm-up there takes
    ~100 s, more than it saves in a short run), CUDA graphs on CUDA."""
    max_model_len: int | None = Field(None, ge=16)
    """Longest sequence (prompt + continuation). null: the caller's budget (e.g.
    ``rollout.max_total_tokens``)."""
    cpu_threads_bind: str | None = None
    """CPU only: the cores of the worker's threads (vLLM's
    ``VLLM_CPU_OMP_THREADS_BIND``, e.g. ``0-1``). null: vLLM's own binding, which
    keeps one core free for its scheduler process."""
